"""Foundations every other layer uses: array backend, transformation groups, warping and
interpolation taps, smoothing and normalisation, input validation. No file I/O."""
