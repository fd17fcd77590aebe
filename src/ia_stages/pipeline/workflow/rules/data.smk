rule dataset:
    conda:
        CONDA_ENV
    input:
        dataset_files,
    output:
        directory("results/data/{dataset}.zarr"),
    params:
        settings=settings("dataset"),
        manifest=dataset_manifest,
    log:
        "results/logs/dataset/{dataset}.log",
    shell:
        "ia-stages stage dataset --settings {params.settings} --out {output} 2> {log}"
