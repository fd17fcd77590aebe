"""ia-stages: Invariant Attention, the transformation-invariant kernel kappa^max and the
invariant mean, with a Snakemake pipeline around them."""

__version__ = "0.1.0"

from .attention import invariant_attention, kernel_attention
from .clustering import InvariantAttentionClustering
from .groups import SE2
from .invariant_mean import invariant_mean
from .kmax import kappa_max
from .warp import warp

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
