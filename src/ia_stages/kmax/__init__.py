"""The kappa^max engine: the transformation-invariant kernel for all pairs of images.

Modules (imports point from the top of this list downwards):

- :mod:`~ia_stages.kmax.kappa`: :func:`kappa_max`, the public entry, which picks a mode;
- :mod:`~ia_stages.kmax.candidates`: the candidates mode for large sets
  (``mode="candidates"``): the driver of its passes; :mod:`~ia_stages.kmax.pair_refinement`
  refines its chosen pairs (their polar scan and the per-pair search) and
  :mod:`~ia_stages.kmax.candidate_pairs` keeps the refined pairs and makes the lists of them;
- :mod:`~ia_stages.kmax.knn`: the exact kNN mode (``kappa_max(X, k=...)``): each sample's k
  nearest, from the same scan and refinement run on the pairs that can enter a list;
- :mod:`~ia_stages.kmax.search`: the all-pairs search, its settings, the coarse scans and the
  batching of pairs;
- :mod:`~ia_stages.kmax.neighbours`: :class:`KnnResult`, the one kNN type, and what is done
  to kNN lists alone (from a dense result, symmetrised);
- :mod:`~ia_stages.kmax.polar` and :mod:`~ia_stages.kmax.rings`: the polar rotation
  scan (matrix products) and its compiled ring sampling and peak picking;
- :mod:`~ia_stages.kmax.refine`: the per-pair search from Python (the pairs' layout, its
  limits, :func:`~ia_stages.kmax.refine.search_pairs`); its one scalar source is
  :mod:`~ia_stages.kmax.refine_kernels` (cost, derivatives, Newton-LM steps) and
  :mod:`~ia_stages.kmax.search_kernels` (a pair's search over its starts, the CPU drivers),
  compiled with numba for the CPU; :mod:`~ia_stages.kmax.cuda` compiles the same source (and
  the scan's peak picking) with numba-cuda for the GPU; :mod:`~ia_stages.kmax.refinement`
  sends listed pairs' starts to one or the other;
- :mod:`~ia_stages.kmax.settle`: the settling check (the exhaustive coarse scan of every
  pair's half-resolution images, and the refinement again of the pairs it finds unsettled);
- :mod:`~ia_stages.kmax.align`: Gauss-Newton Levenberg-Marquardt alignment in array code
  (the paper-style local descent; a reference in tests and benchmarks).
"""

from ia_stages.kmax.kappa import kappa_max
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.search import KappaMaxResult, MemoryBudgetError
from ia_stages.settings.search import (
    DENSE_REFERENCE,
    EXACT_SEARCH,
    PEAK_RULES,
    SEARCH_METHODS,
    SearchSettings,
)

__all__ = [
    "DENSE_REFERENCE",
    "EXACT_SEARCH",
    "PEAK_RULES",
    "SEARCH_METHODS",
    "KappaMaxResult",
    "KnnResult",
    "MemoryBudgetError",
    "SearchSettings",
    "kappa_max",
]
