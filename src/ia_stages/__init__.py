"""ia-stages: Invariant Attention, the transformation-invariant kernel kappa^max and the
invariant mean, with a Snakemake pipeline around them."""

__version__ = "0.1.0"

from .attention import invariant_attention, kernel_attention  # noqa: E402
from .clustering import InvariantAttentionClustering  # noqa: E402
from .groups import SE2  # noqa: E402
from .invariant_mean import invariant_mean  # noqa: E402
from .kmax import kappa_max  # noqa: E402
from .warp import warp  # noqa: E402

__all__ = [
    "SE2",
    "InvariantAttentionClustering",
    "__version__",
    "invariant_attention",
    "invariant_mean",
    "kappa_max",
    "kernel_attention",
    "warp",
]
