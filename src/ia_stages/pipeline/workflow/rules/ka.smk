rule ka:
    conda:
        CONDA_ENV
    input:
        "results/data/{dataset}.zarr",
    output:
        directory("results/{dataset}/ka/iterations.zarr"),
    params:
        settings=settings("ka"),
    log:
        "results/logs/{dataset}/ka.log",
    shell:
        "ia-stages stage ka --dataset {input} --settings {params.settings} --out {output} 2> {log}"
