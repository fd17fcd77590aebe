"""ia-stages: Invariant Attention, the transformation-invariant kernel kappa^max and the
invariant mean, with a Snakemake pipeline around them.

The public names below are imported on first use (PEP 562), so that ``ia-stages <stage>`` jobs
load only the modules their stage needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_PUBLIC = {
    "SE2": "ia_stages.core.groups",
    "warp": "ia_stages.core.warp",
    "invariant_attention": "ia_stages.ia.loop",
    "kernel_attention": "ia_stages.ia.attention",
    "InvariantAttentionClustering": "ia_stages.ia.estimator",
    "invariant_mean": "ia_stages.ia.invariant_mean",
    "kappa_max": "ia_stages.kmax",
}

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

if TYPE_CHECKING:
    from ia_stages.core.groups import SE2
    from ia_stages.core.warp import warp
    from ia_stages.ia.attention import kernel_attention
    from ia_stages.ia.estimator import InvariantAttentionClustering
    from ia_stages.ia.invariant_mean import invariant_mean
    from ia_stages.ia.loop import invariant_attention
    from ia_stages.kmax import kappa_max


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ia_stages' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
