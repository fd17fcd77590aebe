"""Seeds derived from one seed and a name, so that every random draw has its own stream."""

from __future__ import annotations

import hashlib


def stage_seed(seed: int, stage: str) -> int:
    """Seed of one stage's (or one draw's) generator, derived from ``seed`` and its name.

    Example
    -------
    >>> stage_seed(0, "knn-sample") == stage_seed(0, "knn-sample") != stage_seed(1, "knn-sample")
    True
    """
    digest = hashlib.sha256(f"{seed}:{stage}".encode()).digest()
    return int.from_bytes(digest[:8], "little")
