"""ia-stages: Invariant Attention, the transformation-invariant kernel kappa^max and the
invariant mean, with a Snakemake pipeline around them."""

__version__ = "0.1.0"

from ia_stages.core.groups import SE2
from ia_stages.core.warp import warp
from ia_stages.ia.attention import invariant_attention, kernel_attention
from ia_stages.ia.estimator import InvariantAttentionClustering
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import kappa_max

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
