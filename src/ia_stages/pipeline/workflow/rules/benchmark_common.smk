# Shared wiring of the clustering benchmark (benchmark.smk): job lists and input functions.
import json
import re

from ia_stages.pipeline.benchmark_config import cluster_settings, group_variants
from ia_stages.benchmark.methods import HEAVY_METHODS, METHODS, method_seeds

BENCH = config["benchmark"]
BENCH_DATASETS = BENCH["datasets"]
BENCH_METHODS = BENCH["methods"]
BENCH_VARIANTS = group_variants(config)  # '{dataset}@{group}' -> dataset (benchmark.groups)
# every benchmark dataset under its own group, then under each other group of benchmark.groups
BENCH_RUNS = BENCH_DATASETS + list(BENCH_VARIANTS)
BENCH_TABLES = [
    f"results/tables/{name}.{ext}"
    for name in ("clustering", "theory", "cost")
    for ext in ("csv", "md", "tex")
] + ["results/figures/benchmark_acc.png"]


wildcard_constraints:
    method="|".join(METHODS),
    seed=r"\d+",


def method_batch(need, heavy=False):
    """(method, seed index) of the benchmark methods that read `need` ('none', 'kmax0',
    'kmax_all') and run in one job per dataset: the light ones, since each alone is a fraction
    of a second of work after seconds of process start-up, and with ``heavy`` the heavy ones
    too (datasets of one kappa^max block, SMALL_BENCH). The light methods reading kappa^max
    all use the dataset's group and the pixel ones none (tests/test_method_table.py), so a
    light batch runs on the same datasets as each of its methods would."""
    return [
        (m, s)
        for m in BENCH_METHODS
        if (heavy or not METHODS[m].heavy) and METHODS[m].needs == need
        for s in method_seeds(m, BENCH["seeds"])
    ]


# A benchmark dataset of one kappa^max block (n <= block_size) runs every method in its
# batches, the heavy ones too; group variants and larger datasets run each heavy method on
# its own (rule cluster) and the light ones in batches.
SMALL_BENCH = sorted(d for d in BENCH_DATASETS if d in _ONE_KMAX_BLOCK)
BATCHES = {  # rule name -> (input read, datasets, methods and seeds)
    f"cluster_{kind}{'_all' if small else ''}": (need, datasets, method_batch(need, small))
    for kind, need, runs in (
        ("pixels", "none", BENCH_DATASETS),  # pixels have no group
        ("graphs", "kmax0", BENCH_RUNS),  # every benchmark run, group variants included
        ("ia", "kmax_all", BENCH_RUNS),
    )
    for small, datasets in (
        (False, [d for d in runs if d not in SMALL_BENCH]),
        (True, [d for d in runs if d in SMALL_BENCH]),
    )
}


def batch_outputs(batch):
    return [directory(f"results/{{dataset}}/cluster/{m}/seed{s}.zarr") for m, s in batch]


def method_settings(d, m, s):
    """The JSON settings of one benchmark job (dataset d, method m, seed index s), quoted."""
    settings = cluster_settings(config, d, m, s, job_backend(config, d, "cluster"))
    return shlex.quote(json.dumps(settings, sort_keys=True))


def batch_settings(batch):
    """Params function: the JSON settings of each job of a batch, shell-quoted, in order."""
    return lambda w: " ".join(method_settings(w.dataset, m, s) for m, s in batch)


def cluster_runs():
    """Every method on every benchmark dataset; the methods that use a group (IA and the
    kappa^max baselines) also on every group variant."""
    return [
        f"results/{d}/cluster/{m}/seed{s}.zarr"
        for d in BENCH_RUNS
        for m in BENCH_METHODS
        if d in BENCH_DATASETS or METHODS[m].transforms == "group"
        for s in method_seeds(m, BENCH["seeds"])
    ]


def ia_stores(d):
    """kappa^max stores of iterations 0..T and feature stores of iterations 1..T."""
    T = ia_iters(d)
    kmax = [f"results/{d}/ia/iter{t}/kmax.zarr" for t in range(T + 1)]
    feats = [f"results/{d}/ia/iter{t}/features.zarr" for t in range(1, T + 1)]
    return kmax, feats


def inputs_of(dataset, need):
    """The dataset, the kappa^max a method reading `need` reads, and the stores whose compute
    it reuses."""
    ins = {"dataset": data_store(dataset), "upstream": []}
    kmax, feats = ia_stores(dataset)
    if need == "kmax0":
        ins["kmax"] = kmax[0]
        ins["upstream"] = [kmax[0]]
    elif need == "kmax_all":
        ins["kmax"] = kmax
        ins["upstream"] = kmax + feats
    return ins


def cluster_inputs(w):
    """Input function of one method's job (inputs_of its need)."""
    return inputs_of(w.dataset, METHODS[w.method].needs)


def batch_inputs(need):
    """Input function of a batch of light methods that all read `need`."""
    return lambda w: inputs_of(w.dataset, need)


def cluster_args(w, input):
    args = []
    if "kmax" in input.keys():
        kmax = input.kmax
        args += ["--kmax", *([kmax] if isinstance(kmax, str) else kmax)]
    if input.upstream:
        args += ["--upstream", *input.upstream]
    return " ".join(shlex.quote(a) for a in args)


def cost_stores(w):
    stores = [f"results/data/{d}.zarr" for d in BENCH_DATASETS]
    for d in BENCH_RUNS:
        for t in range(ia_iters(d) + 1):
            stores += kmax_search_stores(d, t)
        stores += ia_stores(d)[1]
    return stores + cluster_runs()


def cluster_settings_arg(w):
    """Params function: the JSON settings of one benchmark job, shell-quoted."""
    return method_settings(w.dataset, w.method, int(w.seed))
