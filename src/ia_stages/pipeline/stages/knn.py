"""Stages ``knn-features``, ``knn-block``, ``knn-expand``, ``knn-gather`` and ``knn-whole``: the
kNN path of kappa^max.

With a dataset's ``kmax: {mode: candidates}``, no n x n array is stored. Per IA iteration:

- ``knn-features`` (one job): what every row block needs from all images, computed once:
  the rotation- and translation-invariant features (:func:`ia_stages.kmax.features.
  invariant_features`, whose PCA is fitted on all images), every sample's candidates
  (:func:`ia_stages.kmax.candidates.candidate_lists`; in an iteration after the input's with
  ``later_candidates: lists``, its neighbours in the previous iteration's kNN store, and no
  features), the prepared images' squared norms,
  and the all-pairs kappa^max among a seeded random sample of images (by the settings'
  ``sample_search``; what the
  read-out's silhouette and the contraction rule use, :class:`ia_stages.readout.graph.
  KnnDistances`);
- ``knn-block`` (row blocks, one job each): the refinement of the candidate pairs whose
  later image is in its rows (:func:`ia_stages.kmax.pair_refinement.refine_rows`; each pair in one
  block), as refined pairs: by the screen (the default search) with ``features.screen``, else
  by the exact preset;
- ``knn-gather``: every sample's k nearest from all blocks' pairs
  (:func:`ia_stages.kmax.candidate_pairs.knn_from_pairs`), for a dataset group with more
  parameters than SE(2) refined over the group: the kNN store, equal to one unsharded
  ``kappa_max(X, k=k, mode="candidates", group=...)``.

With ``features.screen`` or ``features.n_expand`` > 0 the first gather writes
``knn_first.zarr``; ``knn-expand`` row block jobs run the second pass over those lists
(:func:`ia_stages.kmax.candidates.second_pass`: the screened lists' pairs refined exactly,
each row's best neighbours of neighbours that no block has refined yet), and the gather of
both passes' pairs (each pair's better optimum) writes the kNN store.

A dataset whose rows are one block (``kmax.rows_per_job`` null, the default: one machine)
runs all of this in one ``knn-whole`` job per iteration, :func:`whole`: the passes of
:func:`ia_stages.kmax.candidates.knn_passes`, the very code of the in-process
``kappa_max(X, k=k, mode="candidates")`` and the same steps as the row blocks', in one
process start with no store between them, and the same kNN store.

The kNN store holds ``indices``, ``sqdist``, ``value`` ``(sample, neighbour)`` and ``params``
``(sample, neighbour, param)`` of a :class:`ia_stages.kmax.KnnResult`, and the sample's
``sample_index`` and ``sample_sqdist``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from ia_stages.core.backend import BackendError, resolve_backend, to_numpy
from ia_stages.core.groups import SE2, AffineFamily, group_of, has_mirror, lists_group
from ia_stages.ia.distances import knn_sample_search, knn_search
from ia_stages.kmax import SearchSettings
from ia_stages.kmax.candidate_pairs import CandidatePairs, knn_from_pairs
from ia_stages.kmax.candidates import (
    candidate_lists,
    first_pass,
    has_second_pass,
    knn_passes,
    listed_candidates,
    prepared_images,
    second_pass,
)
from ia_stages.kmax.compile_ahead import search_compiled_ahead, worth_compiling_ahead
from ia_stages.kmax.features import invariant_features
from ia_stages.kmax.group_search import refine_knn
from ia_stages.kmax.neighbours import KnnResult
from ia_stages.pipeline.stages.common import (
    InputError,
    job_tree,
    load_features,
    on_backend,
    require_images,
    timer,
)
from ia_stages.pipeline.store import provenance, read_store, store_sizes, strings, write_store
from ia_stages.readout.graph import KnnDistances, sample_indices, sample_sqdist
from ia_stages.settings.features import FeatureSettings
from ia_stages.settings.sizing import knn_features, knn_width

KNN_VARIABLES = ("indices", "sqdist", "params", "value", "sample_index", "sample_sqdist")


def _parts(settings: dict, n: int) -> tuple[FeatureSettings, SearchSettings, int]:
    """The feature settings sized to the ``n`` images (c, as every job of the run sizes
    it), the per-pair search and the list length k, as the estimator's kNN path has them
    (:func:`ia_stages.ia.distances.knn_distances`)."""
    t = job_tree(settings)
    try:
        k = knn_width(t, n)
        return knn_features(t, n).sized(n, k), knn_search(t), k
    except ValueError as err:
        raise InputError(f"settings key {err}") from None


def _images(path: str | Path, settings: dict) -> tuple[np.ndarray, np.ndarray]:
    """The images of ``path`` and the same as the candidates mode compares them (smoothed,
    normalised); bad input names the key."""
    V = require_images(load_features(path), path)
    fs, search, k = _parts(settings, V.shape[0])
    t = job_tree(settings)
    try:
        Un = prepared_images(V, k, t.sigma, t.normalization, search, fs)
    except ValueError as err:
        raise InputError(f"{path}: the kNN path's settings: {err}") from None
    return V, Un


def _prepared(path: str | Path, settings: dict) -> np.ndarray:
    """The images of ``path`` as the candidates mode compares them (:func:`_images`)."""
    return _images(path, settings)[1]


def _group(settings: dict) -> SE2 | AffineFamily:
    """The dataset's group (its tree's ``group`` and ``mirror``)."""
    return group_of(job_tree(settings))


def _lists_group(settings: dict) -> SE2 | AffineFamily:
    """The group the row blocks search (:func:`~ia_stages.core.groups.lists_group` of the
    dataset's)."""
    return lists_group(_group(settings))


def _on_device(Un: np.ndarray, settings: dict) -> tuple[Any, str]:
    """The prepared images on the settings' backend (a GPU job refines there: cupy arrays
    run the scan and the refinement's CUDA builds); numpy when the settings name none."""
    return on_backend(Un, settings.get("backend", "numpy"))


def features(
    images: str | Path, out: str | Path, settings: dict, previous: str | Path | None = None
) -> xr.Dataset:
    """The global part of one iteration's kNN path, computed once (see the module docstring).
    With ``previous`` (the previous iteration's kNN store; ``later_candidates: lists``) every
    sample's candidates are its neighbours there and no features are computed. For the input
    images the search kernel is compiled in a background process while the features and
    candidates are made, where that helps (:func:`_compiled_ahead`; the time only).

    Example
    -------
    >>> features("results/data/d.zarr", "knn_features.zarr", settings)  # doctest: +SKIP
    """
    with _compiled_ahead(images, settings, previous) as ready:
        V, Un = _images(images, settings)
        ds = _features(V, Un, *_on_device(Un, settings), settings, previous, ready)
    write_store(ds, out)
    return ds


def _compiled_ahead(
    images: str | Path, settings: dict, previous: str | Path | None
) -> AbstractContextManager[Callable[[], None]]:
    """:func:`~ia_stages.kmax.compile_ahead.search_compiled_ahead` for a job's sample search:
    on for the input images' iteration (a later one finds the kernel compiled), where
    :func:`~ia_stages.kmax.compile_ahead.worth_compiling_ahead`."""
    try:
        backend = resolve_backend(settings.get("backend", "numpy"))
    except BackendError:
        backend = "unknown"  # the job's own move to its backend says why
    n = store_sizes(images).get("sample", 0)
    t = job_tree(settings)
    return search_compiled_ahead(
        t.beta, t.normalization, _group(settings), knn_sample_search(t), t.sigma,
        on=previous is None and worth_compiling_ahead(n, backend),
    )  # fmt: skip


def _features(
    V: np.ndarray, Un: np.ndarray, U: Any, backend: str, settings: dict,
    previous: str | Path | None, ready: Callable[[], None] = lambda: None,
) -> xr.Dataset:  # fmt: skip
    """The features store of :func:`features` (not written) from the images ``V``, their
    prepared form ``Un`` and the same on the settings' backend, ``U``; ``ready`` is called
    before the first search (:func:`_compiled_ahead`)."""
    n = Un.shape[0]
    fs, search, _ = _parts(settings, n)
    tree = job_tree(settings)
    pick = sample_indices(n, tree.path.sample_size(n), int(settings["seed"]))
    with timer() as t:
        if previous is None:
            F = invariant_features(U, fs, mirror=has_mirror(_group(settings)))
            cand = candidate_lists(U, F, fs, search)
            embedding = np.asarray(to_numpy(F), dtype=np.float32)
        else:
            cand = listed_candidates(read_knn(previous, n).knn)
            embedding = np.zeros((n, 0), dtype=np.float32)
        ready()
        sq = sample_sqdist(
            V, pick, tree.beta, tree.normalization, _group(settings), knn_sample_search(tree),
            tree.sigma,
        )  # fmt: skip
    ds = xr.Dataset(
        {
            "embedding": (("sample", "dim"), embedding),
            "candidates": (("sample", "candidate"), cand),
            "norm2": (("sample",), (Un**2).reshape(n, -1).sum(1)),
            "sample_index": (("pick",), pick),
            "sample_sqdist": (("pick", "pick_j"), sq),
        },
        coords={"sample": np.arange(n)},
    )
    ds.attrs = provenance(
        "knn-features", settings, settings["seed"], backend, n=n,
        n_candidates=int(fs.n_candidates), wall_seconds=t["seconds"],
    )  # fmt: skip
    return ds


def row_blocks(n: int, rows_per_job: int) -> list[range]:
    """The row blocks of the ``knn-block`` jobs: ``rows_per_job`` rows each.

    Example
    -------
    >>> row_blocks(5, 2)
    [range(0, 2), range(2, 4), range(4, 5)]
    """
    return [range(a, min(a + rows_per_job, n)) for a in range(0, n, rows_per_job)]


def block(
    images: str | Path,
    feats: str | Path,
    out: str | Path,
    bi: int,
    rows_per_job: int,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """Refine the candidate pairs whose later image is in row block ``bi`` (the lists are
    the features store's ``candidates``) and write them (``a``, ``b``, ``sqdist``, ``params``,
    ``scanned`` along ``pair``)."""
    Un = _prepared(images, settings)
    n = Un.shape[0]
    cand = read_store(feats, required=("candidates",))["candidates"].values
    if cand.shape[0] != n:
        raise InputError(f"{feats}: candidates of {cand.shape[0]} samples, images have n={n}")
    rows = _block_rows(images, n, rows_per_job, bi)
    U, backend = _on_device(Un, settings)
    pairs, seconds = _first_pass(U, cand, rows, settings, progress)
    return _write_pairs(pairs, "knn-block", settings, bi, n, rows, seconds, out, backend)


def _first_pass(
    U: Any, cand: np.ndarray, rows: range, settings: dict, progress: Callable | None
) -> tuple[CandidatePairs, float]:
    """:func:`~ia_stages.kmax.candidates.first_pass` of ``rows`` (the refined candidate pairs
    whose later image is in them) and the seconds taken."""
    fs, search, k = _parts(settings, U.shape[0])
    tree = job_tree(settings)
    with timer() as t:
        pairs = first_pass(
            U, cand, rows, k, tree.beta, _lists_group(settings), search, tree.sigma, fs,
            progress,
        )  # fmt: skip
    return pairs, t["seconds"]


def expand(
    images: str | Path,
    first: str | Path,
    blocks: list[str | Path],
    out: str | Path,
    bi: int,
    rows_per_job: int,
    settings: dict,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """The second pass of row block ``bi`` over the first gather's lists (``first``):
    :func:`ia_stages.kmax.candidates.second_pass` of the pairs whose later image is in the
    block's rows (the screened lists' pairs refined exactly; every sample's
    ``features.n_expand`` best neighbours of neighbours, less the pairs the first round's
    ``blocks`` refined), written as :func:`block` writes its pairs.

    Example
    -------
    >>> expand("d.zarr", "knn_first.zarr", ["knn/0.zarr"], "x/0.zarr", 0, 2048, s)
    ...  # doctest: +SKIP
    """
    Un = _prepared(images, settings)
    n = Un.shape[0]
    lists = read_knn(first, n).knn
    fs, search, k = _parts(settings, n)
    if not has_second_pass(search, fs, k):
        raise InputError(
            f"{out}: settings keys 'path.features.screen' and 'n_expand': no second pass to run"
        )
    rows = _block_rows(images, n, rows_per_job, bi)
    done = [read_store(p, required=("a", "b")) for p in blocks]
    skip = np.unique(np.concatenate([d["a"].values * n + d["b"].values for d in done]))
    U, backend = _on_device(Un, settings)
    pairs, seconds = _second_pass(U, lists, skip, rows, settings, progress)
    return _write_pairs(pairs, "knn-expand", settings, bi, n, rows, seconds, out, backend)


def _second_pass(
    U: Any, lists: KnnResult, skip: np.ndarray, rows: range, settings: dict,
    progress: Callable | None,
) -> tuple[CandidatePairs, float]:  # fmt: skip
    """:func:`~ia_stages.kmax.candidates.second_pass` of ``rows`` over the first round's
    ``lists`` (``skip``: the pairs a * n + b already refined) and the seconds taken."""
    fs, search, _ = _parts(settings, U.shape[0])
    tree = job_tree(settings)
    with timer() as t:
        pairs = second_pass(
            U, lists, skip, rows, tree.beta, _lists_group(settings), search, tree.sigma, fs,
            progress,
        )  # fmt: skip
    return pairs, t["seconds"]


def _block_rows(images: str | Path, n: int, rows_per_job: int, bi: int) -> range:
    """Row block ``bi`` of ``n`` samples; one line naming the images when out of range."""
    blocks = row_blocks(n, rows_per_job)
    if not 0 <= bi < len(blocks):
        raise InputError(f"{images}: row block {bi} outside 0..{len(blocks) - 1} for n={n}")
    return blocks[bi]


def _write_pairs(pairs, stage, settings, bi, n, rows, seconds, out, backend) -> xr.Dataset:
    """Write one row block's refined pairs (``a``, ``b``, ``sqdist``, ``params``,
    ``scanned`` along ``pair``) with the stage's provenance."""
    ds = xr.Dataset(
        {
            "a": (("pair",), pairs.a),
            "b": (("pair",), pairs.b),
            "sqdist": (("pair",), pairs.sqdist),
            "params": (("pair", "param"), pairs.params),
            "scanned": (("pair",), pairs.scanned),
        },
        coords={"param": strings(_lists_group(settings).param_names)},
    )
    ds.attrs = provenance(
        stage, settings, settings["seed"], backend, block=bi, n=n, rows=[rows.start, rows.stop],
        wall_seconds=seconds,
    )  # fmt: skip
    write_store(ds, out)
    return ds


def gather(
    blocks: list[str | Path],
    feats: str | Path,
    out: str | Path,
    settings: dict,
    images: str | Path | None = None,
) -> xr.Dataset:
    """Merge the row blocks' pairs into the kNN store (see the module docstring).

    The blocks search SE(2) (with mirror images where the dataset's group has them,
    :func:`~ia_stages.core.groups.lists_group`); with ``images`` and a dataset group with more
    parameters (``settings['group']``: similarity, affine), the merged lists are refined over
    the group from their optima and re-ranked (:func:`ia_stages.kmax.group_search.refine_knn`, as
    ``kappa_max(k=..., group=...)`` does). The first round's gather (the expansion's lists)
    is called without ``images``.
    """
    if not blocks:
        raise InputError(f"{out}: no kNN row blocks to gather")
    f = read_store(feats, required=("norm2", "sample_index", "sample_sqdist"))
    n = int(f.sizes["sample"])
    parts = [(p, read_store(p, required=("a", "b", "sqdist", "params", "scanned"))) for p in blocks]
    covered = np.zeros(n, dtype=bool)
    for path, b in parts:
        if int(b.attrs.get("n", -1)) != n:
            raise InputError(f"{path}: block is for n={b.attrs.get('n')}, the features for n={n}")
        lo, hi = b.attrs["rows"]
        covered[lo:hi] = True
    if not covered.all():
        raise InputError(f"{out}: kNN row blocks do not cover row {int(np.argmin(covered))}")
    pairs = [
        CandidatePairs(*(b[v].values for v in ("a", "b", "sqdist", "params", "scanned")))
        for _, b in parts
    ]
    V = None
    if images is not None and _group(settings) != _lists_group(settings):
        V = require_images(load_features(images), images)
    seconds = sum(float(b.attrs["wall_seconds"]) for _, b in parts)
    ds = _gathered(pairs, f, V, settings, "knn-gather", seconds)
    write_store(ds, out)
    return ds


def _gathered(
    parts: list[CandidatePairs], f: xr.Dataset, V: np.ndarray | None, settings: dict,
    stage: str, seconds: float,
) -> xr.Dataset:  # fmt: skip
    """The kNN store (not written) of the refined pairs of ``parts`` and the features store
    ``f`` (:func:`_knn_store` of their lists). ``seconds``: the parts' time, for
    ``wall_seconds``."""
    n = int(f.sizes["sample"])
    k = _parts(settings, n)[2]
    with timer() as t:
        pairs = CandidatePairs.concat(parts)
        knn = knn_from_pairs(
            n, k, pairs, job_tree(settings).beta, f["norm2"].values, _lists_group(settings)
        )
    return _knn_store(knn, f, V, settings, stage, seconds + t["seconds"], len(parts))


def _knn_store(
    knn: KnnResult, f: xr.Dataset, V: np.ndarray | None, settings: dict, stage: str,
    seconds: float, blocks: int,
) -> xr.Dataset:  # fmt: skip
    """The kNN store (not written) of the lists ``knn`` (over the lists' group) and the
    features store ``f``; with the images ``V`` and a dataset group with more parameters than
    the lists', the lists refined over the group. ``seconds``: the time the lists took, for
    ``wall_seconds``; ``blocks``: the parts of refined pairs merged into them."""
    n = int(f.sizes["sample"])
    _, search, k = _parts(settings, n)
    tree = job_tree(settings)
    group, lists = _group(settings), _lists_group(settings)
    refined = V is not None and group != lists
    with timer() as t:
        if refined:
            knn = refine_knn(V, knn, tree.beta, tree.normalization, group, search, tree.sigma)
    names = (group if refined else lists).param_names
    ds = xr.Dataset(
        {
            "indices": (("sample", "neighbour"), knn.indices),
            "sqdist": (("sample", "neighbour"), knn.sqdist),
            "value": (("sample", "neighbour"), knn.value),
            "params": (("sample", "neighbour", "param"), knn.params),
            "sample_index": (("pick",), f["sample_index"].values),
            "sample_sqdist": (("pick", "pick_j"), f["sample_sqdist"].values),
        },
        coords={"sample": np.arange(n), "param": strings(names)},
    )
    ds.attrs = provenance(
        stage,
        settings,
        settings["seed"],
        "numpy",
        n=n,
        k=k,
        blocks=blocks,
        pairs_refined=knn.pairs_refined,
        margin_used=knn.margin_used,
        wall_seconds=float(f.attrs["wall_seconds"]) + t["seconds"] + seconds,
    )
    return ds


def whole(
    images: str | Path,
    out: str | Path,
    settings: dict,
    previous: str | Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> xr.Dataset:
    """One iteration's kNN path in one job, for a dataset whose rows are one block (the
    default on one machine): the features, the first pass over every row, the second pass
    over its lists and the gather, with nothing stored between them. The kNN store equals
    that of the ``knn-features``, ``knn-block``, ``knn-expand`` and ``knn-gather`` jobs of any
    row blocks (tested). ``previous`` as :func:`features`'s; ``progress`` is called with the
    pairs refined. The search kernel is compiled ahead as in :func:`features`
    (:func:`_compiled_ahead`).

    Example
    -------
    >>> whole("results/data/d.zarr", "knn.zarr", settings)  # doctest: +SKIP
    """
    with _compiled_ahead(images, settings, previous) as ready:
        V, Un = _images(images, settings)
        n = Un.shape[0]
        U, backend = _on_device(Un, settings)
        f = _features(V, Un, U, backend, settings, previous, ready)
    if _group(settings) == _lists_group(settings):
        V = None  # not held through the passes: only a refinement over the group reads them
    fs, search, k = _parts(settings, n)
    tree = job_tree(settings)
    with timer() as t:
        knn = knn_passes(
            U, f["candidates"].values, k, f["norm2"].values, tree.beta, _lists_group(settings),
            search, tree.sigma, fs, progress,
        )  # fmt: skip
    parts = 1 + has_second_pass(search, fs, k)  # the first pass's pairs and the second's
    ds = _knn_store(knn, f, V, settings, "knn-whole", t["seconds"], parts)
    write_store(ds, out)
    return ds


def is_knn_store(path: str | Path) -> bool:
    """True for a kNN store (``knn-gather``'s), False for a dense kappa^max store."""
    return "neighbour" in store_sizes(path)


def read_knn(path: str | Path, n: int | None = None) -> KnnDistances:
    """A kNN store as :class:`~ia_stages.readout.graph.KnnDistances` (lists and sample),
    checked against ``n`` samples when given."""
    ds = read_store(path, required=KNN_VARIABLES)
    if n is not None and ds.sizes["sample"] != n:
        raise InputError(f"{path}: kNN lists of {ds.sizes['sample']} samples, expected n={n}")
    knn = KnnResult(
        ds["indices"].values.astype(np.int64),
        ds["sqdist"].values,
        ds["params"].values,
        ds["value"].values,
    )
    return KnnDistances(knn, ds["sample_index"].values, ds["sample_sqdist"].values)
