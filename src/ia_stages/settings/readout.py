"""Settings of the read-out (how clusters are read off one iteration's kappa^max) and of the
stopping rule (which iteration's read-out to keep)."""

from __future__ import annotations

from ia_stages.settings.spec import boolean, choice, integer, number, numbers, settings_part

READOUT_KINDS = ("graph", "linkage", "spectral")
LINKAGES = ("average", "single", "complete")
WITH_K = ("spectral", "leiden")
LEIDEN_ENGINES = ("leidenalg", "igraph")
COMMUNITIES = ("silhouette", "leiden", "hdbscan")
NEAR_BEST_RULES = ("fewest", "adjacent")
SELECT_CRITERIA = ("climb", "silhouette", "eigengap")
STOP_RULES = ("stability", "partition", "contraction", "none")
RESOLUTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5)
LEIDEN_ITERATIONS: int | None = None


@settings_part("readout")
class ReadoutSettings:
    """How clusters are read off one iteration's kappa^max (:func:`ia_stages.ia.loop.read_out`)."""

    kind: str = choice(
        "graph",
        READOUT_KINDS,
        "'graph' = the kNN kappa^max graph (Leiden communities without K; with K, with_k); "
        "'linkage' = agglomerative on kappa^max distances, cut at threshold or into K; "
        "'spectral' = spectral clustering of the dense kappa^max affinity (needs K)",
    )
    k: int | None = integer(
        None,
        "neighbours of every sample in the read-out graph, itself excluded (1 <= k < n); None "
        "follows n and K: round(n / 10) clipped to 1..20, at most n / K - 1",
        low=1, nullable=True,
    )  # fmt: skip
    threshold: float = number(
        0.6,
        "'linkage' without K: merge distance between unit-norm features (0..2); also kernel "
        "attention's read-out in the benchmark",
        low=0.0, low_open=True, flag="--threshold",
    )  # fmt: skip
    linkage: str = choice("average", LINKAGES, "'linkage': how cluster distances are taken")
    with_k: str = choice(
        "leiden",
        WITH_K,
        "'graph' with K: 'leiden' (resolution bisected to K) or 'spectral'",
    )
    restarts: int = integer(
        8,
        "with_k 'leiden': bisections with seeds seed, seed + 1, ...; the K-partition of highest "
        "modularity is kept",
        low=1,
    )  # fmt: skip
    restart_bracket: float = number(
        2.0,
        "with_k 'leiden': the restarts after the first bisect within [r / b, b r] of the first "
        "seed's resolution r",
        low=1.0, low_open=True,
    )  # fmt: skip
    restart_tries: int = integer(8, "with_k 'leiden': most Leiden runs per restart", low=1)
    with_k_engine: str = choice(
        "igraph",
        LEIDEN_ENGINES,
        "with_k 'leiden': igraph's own Leiden (higher modularity, faster) or leidenalg's "
        "optimiser (the one the read-outs without K run)",
    )
    community: str = choice(
        "silhouette",
        COMMUNITIES,
        "'graph' without K: 'silhouette' (Leiden at each of resolutions, the partition of "
        "highest silhouette on the kappa^max distances kept), 'leiden' (at resolution) or "
        "'hdbscan'",
    )
    resolution: float = number(
        1.0,
        "Leiden's resolution: community 'leiden' and the 'stability' stopping rule",
        low=0.0, low_open=True,
    )  # fmt: skip
    leiden_iterations: int | None = integer(
        LEIDEN_ITERATIONS,
        "the most iterations of leidenalg's optimiser per Leiden run of the read-out (every "
        "run without K; with K where with_k_engine is 'leidenalg'): a run stops earlier "
        "where an iteration improves nothing; None (the default): no cap. On large graphs a "
        "cap saves most of the read-out's time, but moves the K it finds "
        "(docs/decisions/readout.md)",
        low=1, nullable=True,
    )  # fmt: skip
    resolutions: tuple[float, ...] = numbers(
        RESOLUTIONS, "the Leiden resolutions community 'silhouette' chooses from", low=0.0,
        low_open=True,
    )  # fmt: skip
    silhouette_tolerance: float = number(
        0.1,
        "community 'silhouette' keeps the fewest clusters among the partitions whose silhouette "
        "is within this / m of the highest, m the highest one's cluster count (0: the highest)",
        low=0.0,
    )  # fmt: skip
    near_best: str = choice(
        "adjacent",
        NEAR_BEST_RULES,
        "community 'silhouette': the partitions within silhouette_tolerance of which the "
        "fewest clusters are kept, 'adjacent' (those reached from the highest one's K "
        "downwards, K by K among the cluster counts scored, with no K outside the tolerance "
        "between) or 'fewest' (any)",
    )
    near_best_max: int = integer(
        2,
        "community 'silhouette': the most cluster counts within silhouette_tolerance of the "
        "best for the fewest of them to be kept; where more score that near (a plateau), the "
        "best is kept (0: no limit)",
        low=0,
    )  # fmt: skip
    select: str = choice(
        "climb",
        SELECT_CRITERIA,
        "without K or with a range of K: the criterion that chooses K among the candidate "
        "partitions: 'silhouette' (silhouette_tolerance), 'climb' (the 'silhouette' choice, then "
        "K raised by one while the read-out with K + 1, on the graph narrowed to at most "
        "n / (K + 1) - 1 neighbours, has the higher silhouette; kept where the K reached has a "
        "graph narrower than k) or 'eigengap' (the largest gap of the read-out graph's "
        "normalised Laplacian)",
    )
    climb_steps: int = integer(
        64,
        "select 'climb': no climb where the K whose graph is narrower than readout.k lies more "
        "than this many steps above the 'silhouette' choice (the climb could not be kept, and "
        "on large sets each step is a read-out with K given)",
        low=1, high=10_000,
    )  # fmt: skip
    with_k_join: bool = boolean(
        True,
        "with K given (graph read-out): a partition of the Leiden sweep with more clusters, "
        "joined down to K closest clusters first (average linkage of kappa^max distances), "
        "replaces the read-out with K where its silhouette is higher by more than "
        "with_k_margin",
    )
    with_k_margin: float = number(
        0.025,
        "with_k_join: the least rise in silhouette for which a joined partition replaces the "
        "read-out with K",
        low=0.0, high=2.0,
    )  # fmt: skip
    select_seeds: int = integer(
        5,
        "without K or with a range of K: Leiden seeds over which the choice of K is repeated "
        "for its stability (reported, not used to choose)",
        low=1, high=100,
    )  # fmt: skip
    min_cluster_size: int = integer(10, "community 'hdbscan': HDBSCAN's", low=2)
    merge: float = number(
        0.0,
        "without K: join clusters whose class averages lie within merge x the sum of their "
        "members' mean distances to them (sub-styles of one class); 0 never joins",
        low=0.0,
    )  # fmt: skip


@settings_part("stop")
class StopSettings:
    """Which iteration's read-out to keep (:func:`ia_stages.readout.stopping.stop_iteration`)."""

    rule: str = choice(
        "stability",
        STOP_RULES,
        "'stability' = the last iteration before the Leiden communities of the read-out graph "
        "agree less across n_seeds seeds; 'partition' = the first whose read-out agrees with "
        "the previous one's (ARI >= min_ari); 'contraction' = the last before the "
        "within/between distance ratio stops falling; 'none' = the last",
    )
    n_seeds: int = integer(5, "'stability': Leiden seeds compared", low=2, high=50)
    min_ari: float = number(0.9, "'partition': agreement that ends the iterations", low=0.0,
                            high=1.0)  # fmt: skip
