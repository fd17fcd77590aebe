def dataset_files(w):
    """The user's files of an `images` dataset (a change to them reruns the dataset)."""
    ds = config["datasets"][w.dataset]
    if ds["kind"] != "images":
        return []
    return [ds["path"]] + ([ds["labels"]] if ds["labels"] else [])


rule dataset:
    conda:
        CONDA_ENV
    input:
        dataset_files,
    output:
        directory("results/data/{dataset}.zarr"),
    params:
        settings=settings("dataset"),
    log:
        "results/logs/dataset/{dataset}.log",
    shell:
        "ia-stages dataset --settings {params.settings} --out {output} 2> {log}"
