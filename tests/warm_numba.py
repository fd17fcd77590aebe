"""Compile the package's cached numba kernels once, before the test workers start.

numba caches each ``cache=True`` kernel on disk the first time a process compiles it. On a
fresh clone every pipeline job and test worker that starts before the cache exists compiles
the same kernels at the same time (a kappa^max block job: tens of seconds cold, a few warm). Run
by tests/conftest.py in the controller process; on a warm cache it only loads them.
"""

from __future__ import annotations

import numpy as np

from ia_stages import InvariantAttentionClustering, kappa_max
from ia_stages.data.datasets import shapes3
from ia_stages.data.render import letter, render


def main() -> None:
    X = shapes3(n_per_class=3, size=32, shift_px=(2, 2), rng=np.random.default_rng(0)).data
    kappa_max(X)  # the dense search: ring spectra, peaks, refinement, warps
    kappa_max(X, k=3)  # the kNN mode's selection
    small = {"iterations": 1, "random_state": 0}
    InvariantAttentionClustering(3, **small).fit(X)  # means, class averages
    InvariantAttentionClustering(3, kmax_mode="candidates", **small).fit(X)
    for group in ("similarity", "affine"):
        InvariantAttentionClustering(3, group=group, **small).fit(X)
    render(letter("F", height=12.0), (24, 24), np.zeros((1, 3)))


if __name__ == "__main__":
    main()
