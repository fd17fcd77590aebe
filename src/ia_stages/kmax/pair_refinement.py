"""The exact refinement of chosen pairs (the candidates mode's step 4): the polar scan of those
pairs alone (:class:`_PairScan`: the same spectra, lattice of centres and peak rule as the
all-pairs search) gives their starts, and the compiled per-pair search refines them
(:func:`refine_pairs`; :func:`refine_rows` for the pairs of one row block). Also the coarse
scan about the two centroids alone that filters the candidates
(:meth:`_PairScan.centroid_sqdist`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ia_stages.core.backend import array_module, to_numpy
from ia_stages.core.groups import SE2, AffineFamily, check_lists_group, has_mirror
from ia_stages.kmax.candidate_pairs import CandidatePairs, pair_keys
from ia_stages.kmax.polar import (
    angle_synthesis,
    centroid_translation,
    centroids,
    scan_spectra,
)
from ia_stages.kmax.refine import _pair_layout, sumsq_rows
from ia_stages.kmax.refinement import _refine_candidates
from ia_stages.kmax.rings import lattice_pair_scores, pair_joint_peaks, pair_peaks
from ia_stages.kmax.search import (
    REFINE_BATCH,
    centre_offsets,
    lattice_neighbours,
    mirrored_centroids,
    mirrored_lattice,
)
from ia_stages.kmax.settle import settle, settle_bytes, settle_check, settle_mirrored
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings

COLUMN_BLOCK = 256  # moving images whose lattice spectra are held at once (the exact preset's
# lattice: 0.57 MB per 40 x 40 image; per-pair results do not depend on it)
PAIR_BATCH = 256  # pairs scored at once (each holds the spectra of all its centres)
# on a GPU: larger launches (its memory holds them; one thread per pair needs many pairs)
GPU_COLUMN_BLOCK = 4096
GPU_PAIR_BATCH = 16384
# the refinement's targets per pixel: two float32 coordinates and a float64 value, laid out
# 2 + 1/4 times (36 bytes), and the chunk's own images, their floored and half-resolution
# copies while its layout is made (18)
TARGET_BYTES_PER_PIXEL = 54
SPECTRA_BATCH = 4096  # images whose centroid ring spectra are made at once (bounds memory)


def refine_rows(
    Un: np.ndarray,
    cand: np.ndarray,
    rows: range,
    k: int,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    progress: Callable[[int], None] | None = None,
) -> CandidatePairs:
    """The exact refinement of one row block: every candidate pair (a, b), a < b, whose later
    image b lies in ``rows``.

    A pair is (i, j) for j in i's list, whichever of the two proposed it, refined as
    (min, max) with the later image warped onto the earlier, as the all-pairs search does.
    Each pair belongs to exactly one block (its b's), so the blocks' pairs
    (:meth:`.CandidatePairs.concat`) are the unsharded run's, each refined once; and a block
    needs the lattice spectra of its own rows only.

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`.prepared_images`
    cand : ``(n, c)`` every sample's :func:`.candidate_lists`
    rows : the block's samples
    k, beta, group, settings, sigma, progress : as :func:`.kappa_max_candidates`

    Returns
    -------
    CandidatePairs

    Example
    -------
    >>> cand = candidate_lists(Un, invariant_features(Un, fs), fs)  # doctest: +SKIP
    >>> pairs = refine_rows(Un, cand, range(0, 10), 3)  # doctest: +SKIP
    """
    n = Un.shape[0]
    if cand.shape[0] != n:
        raise ValueError(f"cand: lists of {cand.shape[0]} samples, images have n={n}")
    return refine_pairs(
        Un, np.arange(n), cand, k, beta, group, settings, sigma, progress, moving=rows
    )


def refine_pairs(
    Un: np.ndarray,
    owner: np.ndarray,
    cand: np.ndarray,
    k: int,
    beta: float = 1.0,
    group: SE2 | AffineFamily = SE2(),
    settings: SearchSettings = EXACT_SEARCH,
    sigma: float = 2.0,
    progress: Callable[[int], None] | None = None,
    skip: np.ndarray | None = None,
    moving: range | None = None,
) -> CandidatePairs:
    """The exact refinement of the pairs (owner[i], cand[i, j]), each pair once as (min, max).

    Parameters
    ----------
    Un : ``(n, H, W)`` :func:`.prepared_images`; a cupy array runs the scan and the
        refinement on the GPU (the refinement's layout of all the pairs' images made once)
    owner : ``(m,)`` sample indices
    cand : ``(m, c)`` each owner's candidates; entries < 0 and the owner itself are ignored
    k, beta, group, settings, sigma, progress : as :func:`.kappa_max_candidates`
    skip : sorted keys ``a * n + b`` (a < b) of pairs already refined, left out
    moving : only the pairs whose later image b lies in this range (None: all)

    Returns
    -------
    CandidatePairs

    Example
    -------
    >>> pairs = refine_pairs(Un, np.arange(3), np.array([[1], [2], [0]]), 2)  # doctest: +SKIP
    """
    check_lists_group(group, "the candidate mode")
    n = Un.shape[0]
    i = np.repeat(owner, cand.shape[1])
    j = cand.ravel()
    ok = (j >= 0) & (j != i)
    i, j = i[ok], j[ok]
    key = pair_keys(i, j, n)
    if moving is not None:
        later = key % n
        key = key[(later >= moving.start) & (later < moving.stop)]
        del later
    key = np.unique(key)
    del i, j, ok
    if skip is not None and skip.size:
        key = key[~np.isin(key, skip, assume_unique=True)]
    a, b = key // n, key % n  # a < b: the later image b is warped onto a
    del key
    out = CandidatePairs(
        a, b, np.empty(a.size), np.empty((a.size, group.n_params)), np.empty(a.size)
    )
    if k == 1 or a.size == 0:
        return out
    # the images these pairs touch: the scan's spectra and the refinement's layout are made
    # for those alone, in local indices; on the CPU they are read from Un a batch at a time
    # (a copy of nearly all images would cost as much memory as Un itself)
    xp = array_module(Un)
    mirror = has_mirror(group)
    need = np.unique(np.concatenate([a, b]))
    Ul = _Rows(Un, need) if xp is np else (Un if need.size == n else Un[xp.asarray(need)])
    uu = sumsq_rows(Ul, SPECTRA_BATCH)
    scan = _PairScan(Ul, settings, mirror)
    if need.size == n:  # every image: local indices are the sample indices
        la, lb = a, b
    else:
        la, lb = np.searchsorted(need, a), np.searchsorted(need, b)  # a < b keeps la < lb
    width = COLUMN_BLOCK if xp is np else GPU_COLUMN_BLOCK
    if xp is np:
        # on the CPU the targets are laid out once per chunk of images that memory_mb holds
        # (not once per block of moving images: each block's pairs reach most images), and
        # each block's moving images per block
        step = _targets_per_chunk(Ul.shape[1:], settings)
        chunks = [range(f, min(f + step, need.size)) for f in range(0, need.size, step)]
    else:
        # on a GPU the refinement's layout (several copies of each image) of all images, once
        chunks = [range(0, need.size)]
        layout = _pair_layout(Ul, Ul, sigma, settings, mirror)
    check = fixed_check = None
    for chunk in chunks:
        ours = np.flatnonzero((la >= chunk.start) & (la < chunk.stop))
        if ours.size == 0:
            continue
        if xp is np:
            fixed_side = images = None  # the last chunk's layout goes before this one's is made
            fixed_side = _pair_layout(Ul[chunk.start : chunk.stop], Ul[:1], sigma, settings)
            targets = Ul[chunk.start : chunk.stop]
            fixed_check = settle_check(targets, targets[:1], sigma, settings)
        elif check is None:
            check = settle_check(Ul, _with_mirrors(Ul) if mirror else Ul, sigma, settings)
        by_b = ours[np.argsort(lb[ours], kind="stable")]  # one moving image's pairs together
        cols, first = np.unique(lb[by_b], return_index=True)
        bounds = np.r_[first, by_b.size]
        for c0 in range(0, cols.size, width):
            block = cols[c0 : c0 + width]
            sel = by_b[bounds[c0] : bounds[min(c0 + width, cols.size)]]
            starts, scanned = scan.starts(la[sel], lb[sel], block, uu)
            if xp is np:
                moving_side = _pair_layout(Ul[:1], Ul[block], sigma, settings, mirror)
                images = fixed_side.with_moving(moving_side)
                fixed, moving = la[sel] - chunk.start, np.searchsorted(block, lb[sel])
                if fixed_check is not None:
                    V = Ul[block]
                    check = fixed_check.with_moving(_with_mirrors(V) if mirror else V)
            else:
                images, fixed, moving = layout, la[sel], lb[sel]
            n_moving = block.size if xp is np else need.size
            n_plain = settings.n_candidates if mirror else None
            for r in range(0, sel.size, REFINE_BATCH):
                s, part = sel[r : r + REFINE_BATCH], slice(r, r + REFINE_BATCH)
                won = xp.zeros(s.size, dtype=bool)
                p, d2 = _refine_candidates(images, fixed[part], moving[part],
                                           xp.asarray(starts[part]), settings, beta, n_plain,
                                           won if mirror else None)  # fmt: skip
                if check is not None and mirror:  # as the all-pairs search's
                    p, d2, won = settle_mirrored(check, images, fixed[part], moving[part], p,
                                                 d2, won, n_moving, settings, beta)  # fmt: skip
                elif check is not None:
                    p, d2 = settle(check, images, fixed[part], moving[part], p, d2, settings,
                                   beta)  # fmt: skip
                out.params[s] = group.of_mirror_image(to_numpy(p), to_numpy(won))
                out.sqdist[s] = to_numpy(d2)
            out.scanned[sel] = scanned
            if progress is not None:
                progress(int(sel.size))
    return out


def _with_mirrors(V: Any) -> Any:
    """``V`` followed by its mirror images (columns reversed), as the settling check of a
    search with mirror images takes its moving images."""
    xp = array_module(V)
    return xp.concatenate([V, V[..., ::-1]])


def _targets_per_chunk(shape: tuple[int, ...], settings: SearchSettings) -> int:
    """How many images' refinement targets the CPU lays out at once: as many as
    ``settings.memory_mb`` holds at the layout's bytes per pixel (pixel coordinates and value,
    float64, at full resolution twice over — all pixels, and those split at ``full_floor`` —
    and at half resolution), at least one."""
    per_image = TARGET_BYTES_PER_PIXEL * int(np.prod(shape)) + settle_bytes(shape, settings)
    return max(1, int(settings.memory_mb * 2**20 // per_image))


class _Rows:
    """The images ``Un[need]`` (``need`` sorted sample indices), read from ``Un`` only where
    indexed: a slice or an index array gives those images (a copy of them alone), so that a
    refinement touching nearly all images holds no second copy of them.

    Example
    -------
    >>> rows = _Rows(np.arange(12.0).reshape(6, 1, 2), np.array([1, 4, 5]))
    >>> rows.shape, rows[1:3][:, 0, 0].tolist(), rows[np.array([0, 2])][:, 0, 1].tolist()
    ((3, 1, 2), [8.0, 10.0], [3.0, 11.0])
    """

    def __init__(self, Un: np.ndarray, need: np.ndarray) -> None:
        self.Un, self.need = Un, need
        self.whole = need.size == Un.shape[0]  # need = 0..n-1: Un itself
        self.shape = (need.size, *Un.shape[1:])
        self.dtype = Un.dtype

    def __getitem__(self, at: slice | np.ndarray) -> np.ndarray:
        return self.Un[at] if self.whole else self.Un[self.need[at]]


class _PairScan:
    """The polar scan of chosen pairs (a, b): scores of a's centroid rings against b's rings
    about each lattice centre, and starts by the search's peak rule; with ``mirror`` also
    the starts of b's mirror image, after b's."""

    def __init__(self, Un: Any, settings: SearchSettings, mirror: bool = False) -> None:
        self.Un, self.settings = Un, settings
        self.xp = xp = array_module(Un)
        self.M = settings.n_angles
        n = Un.shape[0]
        self.m = np.concatenate(
            [to_numpy(centroids(Un[s : s + SPECTRA_BATCH])) for s in range(0, n, SPECTRA_BATCH)]
        )
        self.shape = Un.shape[1:]
        lattice = centre_offsets(settings.centre_offset, settings.centre_rings)
        self.offs = lattice
        self.neighbours = lattice_neighbours(lattice)
        self.synthesis = xp.asarray(angle_synthesis(self.M))
        self.interp = interp = settings.interpolation
        self.A = None  # (K, n, 2R): every image's rings about its centroid, made in batches
        for s in range(0, n, SPECTRA_BATCH):
            part = slice(s, min(s + SPECTRA_BATCH, n))
            centre = xp.asarray(self.m[None, part])
            A = scan_spectra(Un[part], centre, self.M, interpolation=interp)[:, :, 0]
            if self.A is None:
                self.A = xp.empty((A.shape[0], n, A.shape[2]))
            self.A[:, part] = A
        self.mirror = mirror
        if mirror:
            self.lattice_f = mirrored_lattice(lattice)
            self.m_f = to_numpy(mirrored_centroids(self.m, self.shape[1]))

    def centroid_sqdist(self, a: np.ndarray, b: np.ndarray, uu: np.ndarray) -> np.ndarray:
        """Coarse d2 ``(m,)`` of pairs (a, b): best rotation about both centroids."""
        xp = self.xp
        R = self.A.shape[2] // 2
        out = np.empty(a.size)
        step = 16 * PAIR_BATCH
        for p in range(0, a.size, step):
            ia, ib = xp.asarray(a[p : p + step]), xp.asarray(b[p : p + step])
            u, v = self.A[:, ia], self.A[:, ib]  # (K, m, 2R)
            re = (u * v).sum(-1)
            im = (u[..., R:] * v[..., :R] - u[..., :R] * v[..., R:]).sum(-1)
            G = xp.stack([re, im], 1).reshape(2 * u.shape[0], -1)  # rows 2k + part
            best = to_numpy((G.T @ self.synthesis).max(1))
            out[p : p + step] = (
                uu[a[p : p + step]] + uu[b[p : p + step]] - 2.0 * (2.0 * np.pi / self.M) * best
            )
        return out

    def starts(
        self, a: np.ndarray, b: np.ndarray, cols: np.ndarray, uu: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Starts ``(m, n_candidates, 3)`` (with ``mirror`` ``(m, 2 n_candidates, 3)``: b's,
        then its mirror image's) and scan d2 ``(m,)`` of pairs whose b is among the sorted
        ``cols`` (the lattice spectra of those images alone are computed)."""
        xp = self.xp
        centres = xp.asarray(self.m[None, cols] + self.offs[:, None])
        B = scan_spectra(self.Un[xp.asarray(cols)], centres, self.M, interpolation=self.interp)
        c = self.settings.n_candidates
        sides = 1 + self.mirror
        starts = np.empty((a.size, c * sides, 3))
        scanned = np.empty(a.size)
        batch = PAIR_BATCH if xp is np else GPU_PAIR_BATCH
        for p in range(0, a.size, batch):
            s = slice(p, p + batch)
            ia, ib = a[s], b[s]
            m = ia.size
            scores = xp.empty((m, B.shape[2], self.M), dtype=np.float32)
            jb = np.searchsorted(cols, ib)
            best = np.full(m, -np.inf)
            for side in range(sides):
                if side == 0:
                    theta, best_o = self._peaks(self.A, B, ia, jb, scores, c)
                    m_v = self.m[ib]
                else:
                    # a against the mirror image of b scores as the mirror image of a (its
                    # centroid spectra conjugated, this batch's alone) against b, at the
                    # mirrored centre and the opposite angle: b's lattice spectra are not
                    # copied
                    A_f = self.A[:, xp.asarray(ia)]
                    A_f[..., A_f.shape[2] // 2 :] *= -1.0
                    theta, best_o = self._peaks(A_f, B, np.arange(m), jb, scores, c)
                    theta, best_o = np.mod(-theta, 2 * np.pi), self.lattice_f[best_o]
                    m_v = self.m_f[ib]
                centre = m_v[:, None, :] + self.offs[best_o]
                shift = centroid_translation(theta, self.m[ia], centre, self.shape)
                starts[s, side * c : (side + 1) * c] = np.concatenate([theta[..., None], shift], -1)
                best = np.maximum(best, to_numpy(scores.reshape(m, -1).max(1)).astype(np.float64))
            scanned[s] = uu[ia] + uu[ib] - 2.0 * (2.0 * np.pi / self.M) * best
        return starts, scanned

    def _peaks(
        self, A: Any, B: Any, ia: np.ndarray, jb: np.ndarray, scores: Any, c: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores of pairs (ia[p], jb[p]) (rings ``A`` about the centroids, ``B`` about the
        lattice) into ``scores (m, n_o, M)`` and their ``c`` peaks (theta, centre), by the
        compiled kernels: numba's CPU threads, or CUDA for cupy."""
        m = ia.size
        joint = self.settings.peaks == "joint"
        if self.xp is np:
            lattice_pair_scores(A, B, ia, jb, self.synthesis, scores)
            rows, zero = np.arange(m), np.zeros(m, dtype=np.int64)
            if joint:
                return pair_joint_peaks(scores[:, None], rows, zero, c, self.neighbours)
            return pair_peaks(scores[:, None], rows, zero, c)
        # lazy: numba.cuda is optional (arrays on a GPU only)
        from ia_stages.kmax.cuda import (
            lattice_pair_scores_cuda,
            pair_joint_peaks_cuda,
            pair_peaks_cuda,
        )

        xp = self.xp
        lattice_pair_scores_cuda(A, B, xp.asarray(ia), xp.asarray(jb), self.synthesis, scores)
        rows, zero = xp.arange(m), xp.zeros(m, dtype=np.int64)
        if joint:
            found = pair_joint_peaks_cuda(scores[:, None], rows, zero, c, self.neighbours)
        else:
            found = pair_peaks_cuda(scores[:, None], rows, zero, c)
        return to_numpy(found[0]), to_numpy(found[1])
