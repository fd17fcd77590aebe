"""Exact k-nearest-neighbour mode of kappa^max: each sample's k nearest, without all n^2 pairs.

kappa^max is monotone in the squared distance d2, so each sample's k largest kernel values are
its k smallest d2. The same search as :func:`ia_stages.kmax.kappa_max` runs (same scan
settings, centres and peak rule, same compiled refinement), but only on the pairs that can
enter a list:

1. **Scan** (all pairs i < j, tile by tile, :class:`ia_stages.kmax.search.PolarScan`): every
   pair's best rotation score gives a coarse squared distance :func:`scan_sqdist` (rotation
   about the scan's centres, translation by matching them). Per sample a bounded pool keeps the
   ``knn_pool`` pairs of lowest coarse d2 with their starting transforms (O(n * knn_pool)).
2. **Refine** each sample's k - 1 best pool pairs (the refinement of ``kappa_max``, same starts,
   same orientation: the later image warped onto the earlier), giving its current k-th refined
   d2, ``tau_i``. Refinement is taken to lower a pair's coarse d2 by at most ``knn_margin``
   (times the pair's mean squared norm; an assumption measured on digits by
   ``bench/knn.py --margins`` at commit f2e6119), so
   every other pair with coarse d2 <= tau_i + knn_margin may still enter i's list: those are
   refined too. Where the pool of i is full and its last entry is itself within that bound,
   pairs outside the pool may qualify: a second scan refines every pair within the bound of
   such a sample, the bound falling as its pairs are refined.

A pair refined for either of its samples counts for both, and refining can only lower tau_i,
so the pairs refined are a superset of those that belong to some list: the lists equal the
top k of the full kappa^max matrix (ties aside) whenever the margin holds. Where a listed
pair's coarse d2 lies further above its sample's k-th d2 than the margin (it was found
anyway), the margin demonstrably does not hold on these images: :attr:`KnnResult.margin_used`
says by how much, and a warning asks for a larger ``knn_margin``.

Convention: **the sample itself is included**, as column 0 (d2 = 0, identity transform,
kappa = 1), as a column of the dense matrix's top k would include its diagonal and as sparse
attention (each column attends to its k nearest, itself included) needs it; columns 1..k-1
are the k - 1 nearest other samples, nearest first.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from ia_stages.core.backend import to_numpy
from ia_stages.core.groups import SE2, AffineFamily, check_lists_group, has_mirror, wrap_angle
from ia_stages.core.smoothing import smooth_normalize
from ia_stages.core.threads import on_threads
from ia_stages.core.validation import check_images
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.kmax.refine import _pair_layout
from ia_stages.kmax.refinement import _refine_candidates
from ia_stages.kmax.search import (
    FLOATS,
    MB,
    REFINE_BATCH,
    SCAN_CHUNK_MB,
    MemoryBudgetError,
    PolarScan,
)
from ia_stages.kmax.settle import settle, settle_bytes, settle_check, settle_mirrored
from ia_stages.settings.search import SearchSettings


def scan_sqdist(scores: Any, uu_i: Any, uu_j: Any, n_angles: int) -> Any:
    """Coarse squared distances ``(n_i, n_j)`` from :meth:`PolarScan.scores` ``(n_i, n_j,
    n_centres, n_angles)``: ||u||^2 + ||v||^2 - 2 <u, v o tau> at the best scanned tau.
    Rings are one pixel apart with ``n_angles`` samples each, so a polar sample stands for
    the area r * 2 pi / n_angles; the scores already carry the factor r."""
    best = scores.reshape(scores.shape[0], scores.shape[1], -1).max(-1).astype(np.float64)
    return uu_i[:, None] + uu_j[None, :] - 2.0 * (2.0 * np.pi / n_angles) * best


def kappa_max_knn(
    X: Any,
    k: int,
    beta: float = 1.0,
    normalization: str = "unit",
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = SearchSettings(),
    progress: Callable[[int], None] | None = None,
    sigma: float = 2.0,
) -> KnnResult:
    """Each sample's k nearest under kappa^max (itself included, first), exactly.

    Parameters
    ----------
    X : ``(n, H, W)`` images (cupy arrays are copied to the host: the kNN mode runs on the
        CPU)
    k : list length, sample included: 1 <= k < n
    beta, normalization, sigma : as :func:`ia_stages.kmax.kappa_max`
    group : :class:`~ia_stages.core.groups.SE2` (default), or SE(2) with mirror images
        (``make_group("se2", mirror=True)``): every pair is then scanned against the later
        image and its mirror image, its coarse d2 is the lower of the two, and its starts from
        both are refined together (as :func:`ia_stages.kmax.search.kappa_max_with_mirrors`);
        ``params`` end in the mirror flag
    settings : the search; ``knn_margin`` and ``knn_pool`` steer which pairs are refined
        (``method`` must be 'polar')
    progress : called with the number of pairs scanned after every tile of the scan (of both
        scans, where the second one runs)

    Memory: the scan's spectra (O(n), as the dense scan's) and tiles (``memory_mb``), the
    pools (n x ``knn_pool`` pairs with their starts) and the lists (n x k): O(n (k +
    knn_pool)), never n^2.

    Returns
    -------
    KnnResult with ``(n, k)`` arrays; its values equal the dense ``kappa_max(X, ...)`` row by
    row at the columns of the row's k largest values.
    """
    start, cpu = time.perf_counter(), time.process_time()
    k = _check_k(k, X)
    check_lists_group(group, "the kNN scan")
    X = check_images(X, "X", dtype=FLOATS)
    if settings.method != "polar":
        raise ValueError(
            f"settings.method must be 'polar' for the kNN mode, got {settings.method!r}"
        )
    if settings.knn_margin < 0:
        raise ValueError(f"settings.knn_margin must be >= 0, got {settings.knn_margin}")
    if settings.knn_pool < 1:
        raise ValueError(f"settings.knn_pool must be >= 1, got {settings.knn_pool}")
    X = np.asarray(to_numpy(X), dtype=np.float64)  # the kNN mode runs on the CPU
    n = X.shape[0]
    mirror = has_mirror(group)
    need = knn_scan_memory_mb(X.shape, k, settings, mirror)
    if need > settings.memory_mb:  # refused before the scan's spectra are set up
        raise MemoryBudgetError(_knn_memory_message(X.shape, need, settings))
    Un = smooth_normalize(X, sigma, normalization)
    uu = (Un**2).reshape(n, -1).sum(1)
    others = k - 1
    pool = max(settings.knn_pool, others)
    scan = PolarScan(Un, Un, settings, mirror)
    sides = 1 + mirror  # starts per pair: c of the later image, then c of its mirror image
    state = _knn_state_bytes(n, k, settings, sides)
    tile_pairs, lanes = _tile_size(scan, state, settings, X.shape, sides)
    refiner = _Refiner(Un, group, settings, beta, sigma)
    result = KnnResult.itself_only(n, k, group.n_params)
    if others == 0:
        return result
    c = settings.n_candidates
    pools = _Pools(n, pool, (c * sides, 3))
    margin = settings.knn_margin

    def select_pool(d2: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        last = pools.sqdist[:, -1]  # live: inf until a pool is full
        return (d2 < last[rows][:, None]) | (d2 < last[cols][None, :])

    for i, j, d2, starts in _scan(scan, uu, tile_pairs, lanes, c, select_pool, progress):
        pools.add(i, j, d2, starts)
    pools.flush()
    result.pairs_scanned = n * (n - 1) // 2

    # the k - 1 best of every pool, then every pool pair within the margin of tau
    lists = _Lists(n, others, (group.n_params + 1,))  # params, then margin used
    refiner.refine_pool(
        pools, lists, np.repeat(np.arange(n), others), np.tile(np.arange(others), n)
    )
    tau = lists.sqdist[:, -1]
    w = 0.5 * (uu[:, None] + uu[pools.partner.clip(0)])
    owner, rank = np.nonzero((pools.partner >= 0) & (pools.sqdist <= tau[:, None] + margin * w))
    refiner.refine_pool(pools, lists, owner, rank)

    # a full pool whose last pair is within the bound may have left out pairs that are too
    reach = lists.sqdist[:, -1] + margin * 0.5 * (uu + uu.max())
    short = (pools.partner[:, -1] >= 0) & (pools.sqdist[:, -1] <= reach)
    result.second_scan = int(short.sum())
    if short.any():
        del pools

        def select_bound(d2: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
            # live: each sample's k-th refined d2 falls as the pairs of this scan are refined
            bound = np.where(short, lists.sqdist[:, -1], -np.inf)
            slack = margin * 0.5 * (uu[rows][:, None] + uu[cols][None, :])
            return (d2 - slack <= bound[rows][:, None]) | (d2 - slack <= bound[cols][None, :])

        held: list = []
        count = 0
        for i, j, d2, starts in _scan(scan, uu, tile_pairs, lanes, c, select_bound, progress):
            held.append((i, j, starts, d2))
            count += i.size
            if count >= REFINE_BATCH:
                refiner.refine(*_joined(held), lists, skip_done=True)
                held, count = [], 0
        if held:
            refiner.refine(*_joined(held), lists, skip_done=True)
        result.pairs_scanned *= 2
    result.pairs_refined = refiner.count
    lists.fill(result, beta, uu)
    if result.margin_used > margin:
        warnings.warn(
            f"kappa_max(k={k}): a listed pair's scan d2 lies {result.margin_used:.3g} above "
            f"its sample's k-th d2, more than knn_margin={margin:g}: pairs beyond the margin "
            "may be missing from the lists; raise settings.knn_margin",
            stacklevel=2,
        )
    result.seconds = {
        "refine": refiner.seconds,
        "total": time.perf_counter() - start,
        "cpu_refine": refiner.cpu,
        "cpu_total": time.process_time() - cpu,
    }
    return result


def _check_k(k: Any, X: Any) -> int:
    n = X.shape[0] if hasattr(X, "shape") and len(X.shape) >= 1 else 0
    if isinstance(k, bool) or not isinstance(k, int | np.integer):
        raise ValueError(
            f"k must be an integer (list length, the sample itself included), got {k!r}"
        )
    if k < 1:
        raise ValueError(f"k must be >= 1 (the sample itself included), got {k}")
    if k >= n:
        raise ValueError(
            f"k must be < n = {n} (the number of images), got {k}: for all pairs use k=None"
        )
    return int(k)


def knn_scan_memory_mb(
    shape: tuple[int, ...], k: int, settings: SearchSettings, mirror: bool = False
) -> float:
    """Least ``memory_mb`` the exact kNN scan (:func:`kappa_max_knn`) of ``shape = (n, H, W)``
    images with lists of ``k`` needs: the scan's spectra of every image, the pools, the lists
    and one tile of scores, from a set-up for one image (nothing of size n is allocated).

    Example
    -------
    >>> s = SearchSettings()
    >>> knn_scan_memory_mb((100_000, 40, 40), 10, s) > s.memory_mb
    True
    >>> knn_scan_memory_mb((1_000, 40, 40), 10, s) < s.memory_mb
    True
    """
    n, h, w = (int(x) for x in shape[:3])
    one = np.ones((1, h, w))
    probe = PolarScan(one, one, settings, mirror)
    sides = 1 + mirror
    per_image = probe.fixed  # the spectra and images of one image (targets = moving images)
    state = _knn_state_bytes(n, k, settings, sides)
    per_image += settle_bytes((h, w), settings)  # the settling check's shifted targets
    return (n * per_image + state + probe.per_pair * sides) / MB


def _knn_state_bytes(n: int, k: int, settings: SearchSettings, sides: int) -> int:
    """Bytes of the pools, the lists and the refinement batch of the second scan."""
    pool = max(settings.knn_pool, k - 1)
    starts_bytes = 3 * 8 * settings.n_candidates * sides
    return (n * pool + REFINE_BATCH) * (8 + 8 + starts_bytes) + n * k * 40


def _knn_memory_message(shape: tuple[int, ...], need: float, settings: SearchSettings) -> str:
    """The one line of a kNN scan that ``memory_mb`` cannot hold, naming the routes that fit."""
    return (
        f"memory_mb={settings.memory_mb:g} is too small for the kNN scan of {shape[0]} "
        f"images of {shape[1]} x {shape[2]} px (needs {need:.1f} MB): use mode='candidates' "
        f"(or mode='auto', which chooses it) or raise memory_mb to {np.ceil(need):.0f}"
    )


def _tile_size(
    scan: PolarScan, state: int, settings: SearchSettings, shape: tuple[int, ...], sides: int = 1
) -> tuple[int, int]:
    """Pairs per scan tile and the number of tiles scanned at once, within ``memory_mb``
    (``sides`` 2: each pair's scores against the mirror image too)."""
    per_pair = scan.per_pair * sides
    room = settings.memory_mb * MB - scan.fixed - state
    if room < per_pair:
        need = (scan.fixed + state + per_pair) / MB
        raise MemoryBudgetError(_knn_memory_message(shape, need, settings))
    lanes = max(1, min(numba.get_num_threads(), int(room // per_pair)))
    pairs = int(min(room // lanes, SCAN_CHUNK_MB * MB) // per_pair)
    return max(1, pairs), lanes


def _scan(
    scan: PolarScan,
    uu: np.ndarray,
    tile_pairs: int,
    lanes: int,
    c: int,
    select: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    progress: Callable[[int], None] | None,
) -> Any:
    """Yield (i, j, d2, starts) of the pairs i < j that ``select(d2 tile, rows, cols)`` keeps,
    tile by tile (rows r0:r1 against columns j0:j1 >= r0), on ``lanes`` threads. A scan with
    mirror images (its columns n.. 2n - 1) scores each pair against the mirror image too: d2
    is the lower of the two, the starts are the image's then its mirror image's."""
    n = uu.size
    mirror = scan.mirror
    side = max(1, int(np.sqrt(tile_pairs)))
    rows = min(side, n)
    cols = max(1, tile_pairs // rows)
    tiles = [
        (r0, min(r0 + rows, n), j0, min(j0 + cols, n))
        for r0 in range(0, n, rows)
        for j0 in range(r0 + 1, n, cols)
    ]

    def task(tile: tuple[int, int, int, int]) -> tuple:
        r0, r1, j0, j1 = tile
        scores = scan.scores(r0, r1, j0, j1)
        rr, cc = np.arange(r0, r1), np.arange(j0, j1)
        d2 = scan_sqdist(scores, uu[r0:r1], uu[j0:j1], scan.M)
        if mirror:
            flipped = scan.scores(r0, r1, n + j0, n + j1)
            d2 = np.minimum(d2, scan_sqdist(flipped, uu[r0:r1], uu[j0:j1], scan.M))
        keep = select(d2, rr, cc) & (cc[None, :] > rr[:, None])
        a, b = np.nonzero(keep)
        i, j = a + r0, b + j0
        if i.size == 0:
            starts = np.empty((0, c * (1 + mirror), 3))
        else:
            starts = scan.starts(scores, i, j, r0, j0, c)
            if mirror:
                more = scan.starts(flipped, i, j + n, r0, n + j0, c)
                starts = np.concatenate([starts, more], 1)
        return i, j, d2[a, b], starts, (r1 - r0) * (j1 - j0)

    for i, j, d2, starts, size in on_threads(task, tiles, lanes):
        if progress is not None:
            progress(size)
        if i.size:
            yield i, j, d2, starts


class _Lists:
    """Per sample the ``size`` entries of lowest d2 seen so far, sorted: partner, d2 and a
    payload each. ``sqdist[:, -1]`` is inf until a list is full."""

    def __init__(self, n: int, size: int, payload: tuple[int, ...]) -> None:
        self.n, self.size = n, size
        self.partner = np.full((n, size), -1, dtype=np.int64)
        self.sqdist = np.full((n, size), np.inf)
        self.payload = np.zeros((n, size, *payload))

    def merge(self, owner: np.ndarray, partner: np.ndarray, d2: np.ndarray, payload: Any) -> None:
        """Merge entries (owner, partner, d2, payload) into the owners' lists."""
        touched = np.unique(owner)
        owner = np.concatenate([np.repeat(touched, self.size), owner])
        partner = np.concatenate([self.partner[touched].ravel(), partner])
        d2 = np.concatenate([self.sqdist[touched].ravel(), d2])
        shape = self.payload.shape[2:]
        payload = np.concatenate([self.payload[touched].reshape(-1, *shape), payload])
        order = np.lexsort((d2, owner))  # stable: equal d2 keep the earlier entry first
        owner, partner, d2, payload = owner[order], partner[order], d2[order], payload[order]
        rank = np.arange(owner.size) - np.searchsorted(owner, owner)
        keep = rank < self.size
        o, r = owner[keep], rank[keep]
        self.partner[o, r] = partner[keep]
        self.sqdist[o, r] = d2[keep]
        self.payload[o, r] = payload[keep]

    def fill(self, result: KnnResult, beta: float, uu: np.ndarray) -> None:
        """Columns 1..k-1 of ``result`` from lists of the refined pairs (payload: params,
        then the scan d2), and the margin they needed: how far the scan d2 of a listed pair
        lies above its sample's k-th d2, over the pair's mean squared norm ``uu``."""
        result.indices[:, 1:] = self.partner
        result.sqdist[:, 1:] = self.sqdist
        result.params[:, 1:] = self.payload[..., :-1]
        w = 0.5 * (uu[:, None] + uu[self.partner])
        need = (self.payload[..., -1] - self.sqdist[:, -1:]) / w
        result.margin_used = float(need.max(initial=0.0))
        result.params[..., 0] = wrap_angle(result.params[..., 0])
        result.value[:] = np.exp(-beta * result.sqdist)


class _Pools(_Lists):
    """:class:`_Lists` of scanned pairs (payload: starts, in the pair's orientation: the later
    image warped onto the earlier), fed pair by pair and merged in batches."""

    FLUSH = 500_000  # pending pairs merged at once

    def __init__(self, n: int, size: int, payload: tuple[int, ...]) -> None:
        super().__init__(n, size, payload)
        self._pending: list = []
        self._count = 0

    def add(self, i: np.ndarray, j: np.ndarray, d2: np.ndarray, starts: np.ndarray) -> None:
        self._pending.append((i, j, d2, starts))
        self._count += i.size
        if self._count >= self.FLUSH:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        i, j, d2, starts = (np.concatenate(a) for a in zip(*self._pending, strict=True))
        self._pending, self._count = [], 0
        self.merge(
            np.concatenate([i, j]), np.concatenate([j, i]), np.concatenate([d2, d2]),
            np.concatenate([starts, starts]),
        )  # fmt: skip


def _joined(held: list) -> tuple[np.ndarray, ...]:
    return tuple(np.concatenate(a) for a in zip(*held, strict=True))


class _Refiner:
    """Refines pairs with :func:`ia_stages.kmax.refinement._refine_candidates` and merges the
    results into :class:`_Lists` of both samples (the transform inverted for the later one)."""

    def __init__(
        self, Un: np.ndarray, group: SE2, settings: SearchSettings, beta: float, sigma: float
    ) -> None:
        self.Un, self.group, self.settings, self.beta = Un, group, settings, beta
        self.mirror = has_mirror(group)
        self.images = _pair_layout(Un, Un, sigma, settings, self.mirror)
        self.n = Un.shape[0]
        moving = np.concatenate([Un, Un[..., ::-1]]) if self.mirror else Un
        self.check = settle_check(Un, moving, sigma, settings)  # as the all-pairs search's
        self.n = Un.shape[0]
        self.uu = (Un**2).reshape(self.n, -1).sum(1)
        self.seconds = self.cpu = 0.0
        self.count = 0
        self.done = np.zeros(0, dtype=np.int64)  # keys i * n + j (i < j) refined from pools

    def refine_pool(
        self, pools: _Pools, lists: _Lists, owner: np.ndarray, rank: np.ndarray
    ) -> None:
        """Refine the pool entries ``pools.partner[owner, rank]`` from their stored starts."""
        partner = pools.partner[owner, rank]
        i, j = np.minimum(owner, partner), np.maximum(owner, partner)
        starts, scanned = pools.payload[owner, rank], pools.sqdist[owner, rank]
        self.refine(i, j, starts, scanned, lists, skip_done=True, record=True)

    def refine(
        self,
        i: np.ndarray,
        j: np.ndarray,
        starts: np.ndarray,
        scanned: np.ndarray,
        lists: _Lists,
        skip_done: bool = False,
        record: bool = False,
    ) -> None:
        """Refine the pairs i < j (each once; with ``skip_done`` not those of ``done``) and
        merge them into ``lists`` with their scan d2 ``scanned``; ``record`` adds them to
        ``done``."""
        start, cpu = time.perf_counter(), time.process_time()
        key = i * self.n + j
        key, first = np.unique(key, return_index=True)
        if skip_done:
            new = ~np.isin(key, self.done, assume_unique=True)
            key, first = key[new], first[new]
        if key.size == 0:
            return
        i, j, starts, scanned = i[first], j[first], starts[first], scanned[first]
        order = np.argsort(j, kind="stable")  # one moving image's pairs together
        i, j, starts, scanned = i[order], j[order], starts[order], scanned[order]
        for a in range(0, i.size, REFINE_BATCH):
            s = slice(a, a + REFINE_BATCH)
            won = np.zeros(i[s].size, dtype=bool)
            p, d2 = _refine_candidates(
                self.images, i[s], j[s], starts[s], self.settings, self.beta,
                *((self.settings.n_candidates, won) if self.mirror else ()),
            )  # fmt: skip
            if self.check is not None and self.mirror:
                p, d2, won = settle_mirrored(self.check, self.images, i[s], j[s], p, d2, won,
                                             self.n, self.settings, self.beta)  # fmt: skip
            elif self.check is not None:
                p, d2 = settle(self.check, self.images, i[s], j[s], p, d2, self.settings,
                               self.beta)  # fmt: skip
            p = self.group.of_mirror_image(p, won)
            info = np.concatenate([np.c_[p, scanned[s]], np.c_[self.group.inverse(p), scanned[s]]])
            lists.merge(
                np.concatenate([i[s], j[s]]), np.concatenate([j[s], i[s]]),
                np.concatenate([d2, d2]), info,
            )  # fmt: skip
        self.count += key.size
        if record:
            self.done = np.union1d(self.done, key)
        self.seconds += time.perf_counter() - start
        self.cpu += time.process_time() - cpu
