"""Settings of the attention weights W and of the invariant mean (Algorithm 1)."""

from __future__ import annotations

from ia_stages.settings.spec import choice, integer, number, numbers, settings_part

ATTENTION_KINDS = ("dense", "knn")
BANDWIDTHS = ("kth", "fixed")
SYMMETRIES = ("none", "mutual", "union")
PRECONDITIONERS = ("gauss-newton", "none")


@settings_part("attention")
class AttentionSettings:
    """Which samples each column of W attends to, and with which weights
    (:mod:`ia_stages.ia.weights`)."""

    kind: str = choice(
        "knn",
        ATTENTION_KINDS,
        "'dense' = the paper's W, column-normalised kappa^max over every sample; 'knn' = "
        "column j attends only to its k nearest samples under kappa^max",
    )
    k: int | None = integer(
        None,
        "knn: neighbours per column, itself included (1 <= k < n); None follows n: round(n / 12) "
        "clipped to 2..10",
        low=1, nullable=True,
    )  # fmt: skip
    bandwidth: str = choice(
        "kth",
        BANDWIDTHS,
        "knn: 'kth' weighs neighbour i of j by exp(-d2_ij / d2_j(k)), d2_j(k) the k-th "
        "neighbour's (adaptive mean shift); 'fixed' by exp(-beta d2_ij)",
    )
    symmetry: str = choice(
        "mutual",
        SYMMETRIES,
        "knn: 'none' keeps j's own k nearest; 'mutual' keeps i only if j is among i's k nearest "
        "too; 'union' adds i when j is among i's k nearest",
    )
    mean_steps: int | None = integer(
        0,
        "knn: Algorithm 1 steps of each column's mean instead of mean.steps (None); 0 is the "
        "weighted mean of the neighbours at their kappa^max alignments",
        low=0, high=10_000, nullable=True,
    )  # fmt: skip


@settings_part("mean")
class MeanSettings:
    """Settings of Algorithm 1, the invariant mean of a column's images
    (:func:`ia_stages.ia.invariant_mean.invariant_mean`), and of the class averages."""

    steps: int = integer(20, "gradient steps N", low=0, high=10_000, flag="--mean-steps")
    step_size: float = number(1.0, "learning rate t", low=0.0, low_open=True)
    sigmas: tuple[float, ...] = numbers(
        (3.0, 1.5, 0.0),
        "smoothing levels (px) tried greedily at every step; 0 = no smoothing",
        low=0.0, high=20.0,
    )  # fmt: skip
    preconditioner: str = choice(
        "gauss-newton",
        PRECONDITIONERS,
        "'gauss-newton' scales each pose's gradient by the inverse of its Gauss-Newton matrix "
        "(t = 1 is a full Gauss-Newton step); 'none' is the paper's plain gradient step",
    )
    weight_floor: float = number(
        1e-4, "images with a weight below weight_floor x the largest are left out (0 keeps all)",
        low=0.0, high=1.0,
    )  # fmt: skip
    max_images: int | None = integer(
        None,
        "align only the heaviest images of each column, at most this many (None: all above "
        "weight_floor); the weight left out is reported",
        low=1, nullable=True, flag="--mean-images",
    )  # fmt: skip
    average_members: int | None = integer(
        256,
        "class averages: at most this many members of a cluster enter its invariant mean, "
        "those nearest its medoid (every member is still aligned); None = all",
        low=1, nullable=True,
    )  # fmt: skip
