"""Stage ``theory``: Table 2 rows of one dataset, one per IA iteration t = 0..T.

- ``R``: R^(t), the largest within-class manifold distance d(S_i, S_j) of the iteration-t
  features (from the stored kappa^max and the features' norms); ``R_ratio`` = R^(t+1) / R^(t)
  (Theorem 4.1 predicts < 1).
- ``group``: the group kappa^max factors out (the dataset's ``group`` block; a group variant
  ``{dataset}@{group}`` of ``benchmark.groups`` reports its base dataset and its group).
- ``kmax_inv_err`` / ``kavg_inv_err`` / ``ksoft_inv_err``: the largest change of the kernel's
  squared distance -log(kernel) / beta between ``samples`` iteration-t features when each is
  rotated (uniformly on the circle) and shifted at random (kappa^max: also scaled, stretched
  and sheared within ``rendered_fraction`` of the group's bounds, by our warp; kappa^avg and
  kappa^soft pool over SE(2) grids and see the SE(2) part only); 0 for an exactly invariant kernel
  (unit-norm images: distances lie in [0, 4]). ``kmax_inv_err_value``: the change of the
  kappa^max value itself. The kappa^max of this check refines every candidate (prune_kappa 0):
  a pruned pair reports its start's distance, which is not invariant (its value is < prune_kappa
  either way).
- ``kmax_inv_err_rendered`` / ``kmax_inv_err_rendered_value`` (row t = 0 only; they do not
  depend on the data): the same for two different letters drawn from their vector outlines
  (:func:`ia_stages.benchmark.theory.rendered_invariance_error`), each under its own random map
  of the group (angle, sub-pixel shift, and within ``rendered_fraction`` of the bounds scale
  and stretch), against the upright pair: the largest change of the squared distance,
  and of the kappa^max value relative to the upright pair's. Images that no warp of ours made.
  ``rendered_floor``: the data's own floor beside it, the largest ||g * r_tau - s (g * r) o tau||
  of the unit-norm smoothed renderings against the exact warp of the upright ones (the
  smoothing g does not commute with scaling and shear: κ^max cannot be more invariant than
  the renderings are copies of one another).
- ``restart_max_distance``: for ``columns`` weight columns j of iteration t, the invariant mean
  is restarted from ``restarts`` different initial transforms (theory.restart_inits); the
  largest kappa^max distance between two restarts' unit-norm means. ``restart_same`` = it is
  below ``tolerance`` (Theorem 3.1: unique up to a transform). Not defined at t = T (no weights).
  The weights are those the iteration used (the feature store's W: dense or kNN attention).
- ``within_mean`` / ``between_mean``: mean manifold distance of pairs of one class / of
  different classes; ``wb_ratio`` their ratio and ``wb_ratio_change`` = wb_ratio^(t+1) /
  wb_ratio^(t) (< 1: the classes separate, the contraction Theorem 4.1 needs); ``attention``
  the kind of W (dense or knn).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from ia_stages.benchmark import metrics as M
from ia_stages.benchmark import theory as Th
from ia_stages.core.groups import SE2, AffineFamily, group_of
from ia_stages.core.seeds import stage_seed
from ia_stages.ia.attention import column_normalize
from ia_stages.kmax import kappa_max
from ia_stages.kmax.grid import GridSettings, group_kernel
from ia_stages.pipeline.benchmark_config import data_of, group_label
from ia_stages.pipeline.stages.common import InputError, job_tree, load_features, require_images
from ia_stages.pipeline.store import read_store, write_text_atomic

COLUMNS = [
    "dataset",
    "group",
    "iteration",
    "R",
    "R_ratio",
    "kmax_inv_err",
    "kmax_inv_err_value",
    "kavg_inv_err",
    "ksoft_inv_err",
    "kmax_inv_err_rendered",
    "kmax_inv_err_rendered_value",
    "rendered_floor",
    "restart_max_distance",
    "restart_same",
    "attention",
    "within_mean",
    "between_mean",
    "wb_ratio",
    "wb_ratio_change",
]


def run(
    dataset: str | Path,
    features: list[str | Path],
    kmax: list[str | Path],
    out: str | Path,
    settings: dict,
) -> pd.DataFrame:
    """``features``: stores of iterations 1..T; ``kmax``: stores of iterations 0..T."""
    if len(kmax) != len(features) + 1:
        raise InputError(f"{out}: need T feature stores and T + 1 kappa^max stores")
    labels = read_store(dataset, required=("label",))["label"].values
    th = settings["theory"]
    rng = np.random.default_rng(stage_seed(settings["seed"], f"theory:{settings['dataset']}"))
    tree = job_tree(settings)
    kw = {"beta": tree.beta, "normalization": tree.normalization, "sigma": tree.sigma}
    search = tree.search
    group = group_of(tree)
    kmax_fn = partial(kappa_max, settings=replace(search, prune_kappa=0.0), group=group, **kw)
    abl = settings["ablation"]
    grid = GridSettings(
        n_angles=abl["n_angles"], max_shift=abl["max_shift"], shift_step=abl["shift_step"]
    )
    kavg_fn = partial(group_kernel, pooling="avg", grid=grid, **kw)
    ksoft_fn = partial(
        group_kernel, pooling="soft", temperature=abl["temperature"], grid=grid, **kw
    )
    # the restarts compare unit-norm means by their kappa^max distance (with the kernel's
    # smoothing, which makes the comparison blind to interpolation blur)
    dist_fn = partial(
        kappa_max,
        beta=1.0,
        normalization="unit",
        settings=search,
        sigma=tree.sigma,
        group=group,
    )
    mean_settings = tree.mean

    rows, R = [], []
    for t, kpath in enumerate(kmax):
        fpath = dataset if t == 0 else features[t - 1]
        V = require_images(load_features(fpath), fpath)
        if t == 0:
            rendered = _rendered(settings, kmax_fn, V.shape[1:], group)
        km = read_store(kpath, required=("value", "params", "sqdist"))
        if km["value"].shape != (V.shape[0],) * 2:
            raise InputError(f"{kpath}: kappa^max is {km['value'].shape}, n={V.shape[0]}")
        dist = M.manifold_distances(km["sqdist"].values, M.feature_norms(V))
        R.append(M.max_within_class(dist, labels))
        within, between = Th.class_separation(dist, labels)
        m = min(th["samples"], V.shape[0])
        pick = np.sort(rng.choice(V.shape[0], m, replace=False))
        taus = Th.random_group_params(rng, m, group, th["max_shift"], th["rendered_fraction"])
        errs = {"kmax": Th.invariance_error(V[pick], kmax_fn, taus, group)}
        for name, fn in (("kavg", kavg_fn), ("ksoft", ksoft_fn)):  # SE(2) grids: SE(2) maps
            errs[name] = Th.invariance_error(V[pick], fn, taus[:, :3])
        spread, same = np.nan, None
        if t < len(features):  # iteration t's weights produced iteration t + 1's features
            fw = read_store(features[t])
            W = fw["weights"].values if "weights" in fw else column_normalize(km["value"].values)
            cols = rng.choice(V.shape[0], min(th["columns"], V.shape[0]), replace=False)
            dists = []
            for j in np.sort(cols):
                inits = Th.restart_inits(
                    km["params"].values, W[:, j], int(j), th["restarts"], rng,
                    th["jitter_deg"], th["jitter_px"], group,
                )  # fmt: skip
                res = Th.restart_spread(V, W[:, j], inits, dist_fn, mean_settings, group)
                dists.append(res.max_distance)
            spread = float(max(dists))
            same = bool(spread < th["tolerance"])
        rows.append(
            {
                "dataset": data_of(settings["dataset"]),
                "group": group_label(tree),
                "iteration": t,
                "R": R[-1],
                "R_ratio": np.nan,
                "kmax_inv_err": errs["kmax"].max_abs_sqdist,
                "kmax_inv_err_value": errs["kmax"].max_abs_value,
                "kavg_inv_err": errs["kavg"].max_abs_sqdist,
                "ksoft_inv_err": errs["ksoft"].max_abs_sqdist,
                "kmax_inv_err_rendered": rendered[0] if t == 0 else np.nan,
                "kmax_inv_err_rendered_value": rendered[1] if t == 0 else np.nan,
                "rendered_floor": rendered[2] if t == 0 else np.nan,
                "restart_max_distance": spread,
                "restart_same": same,
                "attention": tree.attention.kind,
                "within_mean": within,
                "between_mean": between,
                "wb_ratio": within / between if between > 0 else np.nan,
                "wb_ratio_change": np.nan,
            }
        )
    for t in range(len(rows) - 1):
        rows[t]["R_ratio"] = R[t + 1] / R[t] if R[t] > 0 else np.nan
        rows[t]["wb_ratio_change"] = rows[t + 1]["wb_ratio"] / rows[t]["wb_ratio"]
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_text_atomic(df.to_csv(index=False, float_format="%.6g"), out)
    return df


def _rendered(
    settings: dict, kmax_fn: partial, shape: tuple[int, int], group: SE2 | AffineFamily
) -> tuple[float, float, float]:
    """(max |Delta d2|, max relative |Delta kappa^max|, the data's floor) on letters rendered
    under random maps of ``group`` on a canvas of the dataset's ``shape``, with the stage's
    kappa^max; NaN when switched off. Its own random stream, so that the other columns do not
    depend on it."""
    th = settings["theory"]
    if th["rendered_pairs"] == 0:
        return np.nan, np.nan, np.nan
    seed = stage_seed(settings["seed"], f"theory-rendered:{settings['dataset']}")
    rng = np.random.default_rng(seed)
    err = Th.rendered_invariance_error(
        kmax_fn,
        tuple(shape),
        rng,
        pairs=th["rendered_pairs"],
        renderings=th["rendered_renderings"],
        psf=th["rendered_psf"],
        supersample=th["rendered_supersample"],
        group=group,
        fraction=th["rendered_fraction"],
        sigma=job_tree(settings).sigma,
    )
    return err.max_abs_sqdist, err.max_rel_value, err.floor
