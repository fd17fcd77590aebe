"""The clustering benchmark's methods: names, labels and what each one reads (no heavy imports).

``needs`` says which stores a method's job reads besides the dataset: ``'kmax0'`` the
kappa^max of the input images (IA iteration 0), ``'kmax_final'`` the kappa^max of IA's final
features; ``'none'``: only the dataset.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    """label : name in the tables; randomized : runs once per seed (else once);
    needs : 'none' | 'kmax0' | 'kmax_final'; k_given : takes the number of clusters K."""

    label: str
    randomized: bool
    needs: str
    k_given: bool


METHODS: dict[str, Method] = {
    "kmeans": Method("K-means (pixels)", True, "none", True),
    "gmm": Method("GMM, diagonal (pixels)", True, "none", True),
    "ka": Method("KA + read-out", False, "none", False),
    "ka_k": Method("KA, K given", False, "none", True),
    "spectral_kmax": Method("spectral on kappa^max", True, "kmax0", True),
    "kmedoids_kmax": Method("k-medoids on kappa^max", True, "kmax0", True),
    "ti_kmeans": Method("TI K-means (SE(2))", True, "kmax0", True),
    "ia": Method("IA + read-out", False, "kmax_final", False),
    "ia_k": Method("IA (kappa^max), K given", False, "kmax_final", True),
    "ia_kavg_k": Method("IA (kappa^avg), K given", False, "none", True),
    "ia_ksoft_k": Method("IA (kappa^soft), K given", False, "none", True),
}


def method_seeds(method: str, n_seeds: int) -> list[int]:
    """Seed indices a method runs with: 0..n_seeds-1 if randomised, else just 0."""
    return list(range(n_seeds)) if METHODS[method].randomized else [0]
