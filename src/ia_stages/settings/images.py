"""Settings of how images are prepared before any kappa^max: the background, its mask, and
the noise estimate behind ``sigma='auto'``."""

from __future__ import annotations

from ia_stages.settings.spec import SettingError, integer, number, settings_part

BACKGROUNDS = ("none", "median", "mask")
NORMALIZATIONS = ("unit", "none")


@settings_part("noise")
class NoiseSettings:
    """How ``sigma='auto'`` chooses the smoothing from the images
    (:func:`ia_stages.core.noise.choose_sigma`)."""

    border: int = integer(3, "width (px) of the frame whose pixels estimate the noise", low=1)
    residual: float = number(
        0.1,
        "noise left after smoothing, as a fraction of the signal's standard deviation",
        low=0.0, low_open=True,
    )  # fmt: skip
    min_sigma: float = number(1.0, "the sigma of clean images", low=0.0)
    max_sigma: float = number(
        4.0, "the most smoothing chosen (images mostly noise would be smoothed into blobs)",
        low=0.0,
    )  # fmt: skip

    def relations(self) -> None:
        """Checks across fields (one line naming the field)."""
        if self.max_sigma < self.min_sigma:
            raise SettingError(
                f"noise.max_sigma must be >= noise.min_sigma = {self.min_sigma:g}, "
                f"got {self.max_sigma!r}"
            )


@settings_part("mask")
class MaskSettings:
    """How ``background='mask'`` finds each image's support
    (:func:`ia_stages.core.background.support_mask`)."""

    threshold: float = number(
        4.0,
        "noise sds of the smoothed image that a pixel of it must exceed in |value| to belong "
        "to the object",
        low=0.0, low_open=True, flag=True,
    )  # fmt: skip
    sigma: float = number(
        2.0, "smoothing (px) of the image the support is read from", low=0.0, low_open=True
    )
    dilation: int = integer(1, "px the support is grown by (the object's faint rim)", low=0)
    border: int = integer(3, "width (px) of each image's frame its noise is read from", low=1)
