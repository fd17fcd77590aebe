# Shared wiring: wildcard constraints, stage settings, input lists.
import json
import re
import shlex

from ia_stages.pipeline.benchmark_config import data_of
from ia_stages.pipeline.exports import export_settings, star_available
from ia_stages.pipeline.config import (
    column_blocks,
    ia_iterations,
    job_backend,
    job_threads,
    kmax_blocks,
    knn_later_lists,
    knn_path,
    knn_row_blocks,
    knn_rows_per_job,
    knn_second_pass,
    means_block_size,
    stage_settings_json,
)

CONDA_ENV = "../envs/ia-stages.yaml"  # relative to this rules folder
IA_DATASETS = config["ia"]["datasets"]
KA_DATASETS = config["ka"]["datasets"]


def ia_iters(d):
    """IA's iterations of dataset d: its own `iterations`, else ia.iterations."""
    return ia_iterations(config, d)


KNN_DATASETS = [d for d in IA_DATASETS if knn_path(config, d)]  # path.mode: candidates
FIGS = config["figures"]
FIGURE_FILES = {
    "fig2": "results/figures/fig2_ka_blobs.png",
    "fig3": "results/figures/fig3_dataset_ka_means.png",
    "fig4": "results/figures/fig4_ia_weights_means.png",
    "fig5": "results/figures/fig5_invariant_mean.png",
}
FIGURE_DATASETS = {  # figures whose dataset is null in the config are not drawn
    "fig2": FIGS["blobs"],
    "fig3": FIGS["shapes"],
    "fig4": FIGS["shapes"],
    "fig5": FIGS["mean_trace"]["dataset"],
}
FIGURES = [f for name, f in FIGURE_FILES.items() if FIGURE_DATASETS[name] is not None]
# every IA dataset: clusters.csv, its class-average gallery and the read-out's stability
CLASS_OUTPUTS = [
    path
    for d in IA_DATASETS
    for path in (
        f"results/{d}/clusters.csv",
        f"results/figures/{d}_classes.png",
        f"results/figures/{d}_stability.png",
    )
]


def one_of(names):
    """A wildcard constraint matching exactly these names (nothing when there are none)."""
    return "|".join(re.escape(d) for d in sorted(names)) or "(?!)"


# Wildcard constraints: a dataset whose kappa^max (or columns, or kNN rows) is a single block
# gets it in one job (kmax_whole, means_whole, knn_whole); the others in block jobs and a
# gather.
_ONE_KMAX_BLOCK = {d for d in config["datasets"] if len(kmax_blocks(config, d)) == 1}
_ONE_MEANS_BLOCK = {d for d in config["datasets"] if len(column_blocks(config, d)) == 1}
KMAX_WHOLE = one_of(_ONE_KMAX_BLOCK)
KMAX_BLOCKED = one_of(set(config["datasets"]) - _ONE_KMAX_BLOCK)
MEANS_WHOLE = one_of(_ONE_MEANS_BLOCK)
MEANS_BLOCKED = one_of(set(config["datasets"]) - _ONE_MEANS_BLOCK)
# a kNN dataset whose rows are one block (rows_per_job null): one knn_whole job per
# iteration; the others knn_features, row-block jobs and gathers
_ONE_KNN_BLOCK = {d for d in KNN_DATASETS if len(knn_row_blocks(config, d)) == 1}
KNN_WHOLE = one_of(_ONE_KNN_BLOCK)
KNN_BLOCKED = one_of(set(KNN_DATASETS) - _ONE_KNN_BLOCK)


wildcard_constraints:
    dataset="|".join(sorted(config["datasets"])),
    t=r"\d+",
    bi=r"\d+",
    bj=r"\d+",
    cb=r"\d+",


def heavy_threads(w):
    """Threads of a heavy job: `threads`, or 1 for a dataset under `single_core_below` images."""
    return job_threads(config, w.dataset)


def gpu_per_job(stage):
    """Resource function: GPUs a heavy `stage` job of the rule's dataset holds (1, or 0 where
    it runs on numpy)."""
    return lambda w: 0 if job_backend(config, w.dataset, stage) == "numpy" else 1


def settings(stage):
    """Params function: the JSON settings of `stage` for the rule's dataset, shell-quoted."""
    return lambda w: shlex.quote(stage_settings_json(config, stage, w.dataset))


def data_store(d):
    """The dataset store a dataset reads (a group variant reads its base dataset's)."""
    return f"results/data/{data_of(d)}.zarr"


def features_of(w):
    """Features of IA iteration t: the dataset for t = 0, else iteration t's invariant means."""
    t = int(w.t)
    if t == 0:
        return data_store(w.dataset)
    return f"results/{w.dataset}/ia/iter{t}/features.zarr"


def kmax_block_stores(w):
    return [
        f"results/{w.dataset}/ia/iter{w.t}/kmax/{bi}_{bj}.zarr"
        for bi, bj in kmax_blocks(config, w.dataset)
    ]


def kmax_search_stores(d, t):
    """The stores holding iteration t's kappa^max search of dataset d (its pairs and CPU time,
    Table 3): the block stores, or a one-block dataset's n x n store (kmax_whole)."""
    if d in _ONE_KMAX_BLOCK:
        return [f"results/{d}/ia/iter{t}/kmax.zarr"]
    return [f"results/{d}/ia/iter{t}/kmax/{bi}_{bj}.zarr" for bi, bj in kmax_blocks(config, d)]


def kmax_store(d, t):
    """Iteration t's kappa^max of dataset d: the n x n store, or the kNN store (kNN path)."""
    return f"results/{d}/ia/iter{t}/{'knn' if d in KNN_DATASETS else 'kmax'}.zarr"


def knn_block_stores(w):
    return [
        f"results/{w.dataset}/ia/iter{w.t}/knn/{bi}.zarr"
        for bi in knn_row_blocks(config, w.dataset)
    ]


def knn_expands(d):
    """True when dataset d's kNN path has a second pass (knn_expand jobs): the screened lists
    refined exactly (path.features.screen) or expanded (path.features.n_expand > 0)."""
    return knn_second_pass(config, d)


def knn_pair_stores(w):
    """Every pair store the final knn_gather merges: the row blocks, then the expansion's."""
    stores = knn_block_stores(w)
    if knn_expands(w.dataset):
        stores += [
            f"results/{w.dataset}/ia/iter{w.t}/knn_expand/{bi}.zarr"
            for bi in knn_row_blocks(config, w.dataset)
        ]
    return stores


def means_block_stores(w):
    return [f"results/{w.dataset}/ia/iter{w.t}/means/{cb}.zarr" for cb in column_blocks(config, w.dataset)]


def previous_features(w):
    """Features entering the iteration that produces iteration t's features."""
    t = int(w.t) - 1
    if t == 0:
        return data_store(w.dataset)
    return f"results/{w.dataset}/ia/iter{t}/features.zarr"


def previous_lists(w):
    """The kNN store whose lists are iteration t's candidates (later_candidates: lists), else
    none: the input images' iteration and the features' candidates."""
    t = int(w.t)
    if t == 0 or not knn_later_lists(config, w.dataset):
        return []
    return [kmax_store(w.dataset, t - 1)]


def previous_kmax(w):
    return kmax_store(w.dataset, int(w.t) - 1)


def metrics_inputs(w):
    """Stores the metrics of a dataset read: dataset, KA, IA features and kappa^max per iteration."""
    d = w.dataset
    ins = {"dataset": f"results/data/{d}.zarr"}
    if d in KA_DATASETS:
        ins["ka"] = f"results/{d}/ka/iterations.zarr"
    if d in IA_DATASETS:
        T = ia_iters(d)
        ins["ia_features"] = [f"results/{d}/ia/iter{t}/features.zarr" for t in range(1, T + 1)]
        ins["ia_kmax"] = [kmax_store(d, t) for t in range(T + 1)]
        ins["classes"] = f"results/{d}/classes.zarr"  # IA's read-outs without K, made once
    return ins


def metrics_args(w, input):
    """Command-line options for the inputs metrics_inputs gave."""
    args = []
    if "ka" in input.keys():
        args += ["--ka", input.ka]
    if "ia_features" in input.keys():
        args += ["--ia-features", *input.ia_features, "--ia-kmax", *input.ia_kmax]
        args += ["--classes", input.classes]
    return " ".join(shlex.quote(a) for a in args)


def dataset_files(w):
    """The user's files of an `images` dataset (a change to them reruns the dataset)."""
    ds = config["datasets"][w.dataset]
    if ds["kind"] != "images":
        return []
    return [ds["path"]] + ([ds["labels"]] if ds["labels"] else [])


def dataset_manifest(w):
    """Digest of every input image's name, size and content: a param, so that adding,
    deleting, renaming or overwriting any image reruns the dataset (and what reads it)."""
    ds = config["datasets"][w.dataset]
    if ds["kind"] != "images":
        return ""
    from ia_stages.data.user_images import manifest

    cache = f".snakemake/ia-stages/manifest-{w.dataset}.json"  # digests by size and time
    return manifest(ds["path"], ds["labels"], cache)


# the exports' job (rules/classes.smk): whether STAR files can be written, and its settings
STAR = star_available()


def export_settings_json(w):
    return shlex.quote(json.dumps(export_settings(config)))
