# Clusters of every IA dataset: clusters.csv, class averages (gallery) and the read-out's stability.


rule classes:
    conda:
        CONDA_ENV
    input:
        dataset="results/data/{dataset}.zarr",
        kmax=lambda w: [kmax_store(w.dataset, t) for t in range(ia_iters(w.dataset) + 1)],
    output:
        store=directory("results/{dataset}/classes.zarr"),
        csv=report(
            "results/{dataset}/clusters.csv",
            caption="../report/clusters.rst",
            category="Clusters",
            subcategory="{dataset}",
        ),
    params:
        settings=settings("classes"),
    log:
        "results/logs/{dataset}/classes.log",
    threads: heavy_threads
    shell:
        "ia-stages stage classes --dataset {input.dataset} --kmax {input.kmax} --threads {threads}"
        " --settings {params.settings} --out {output.store} --csv {output.csv} 2> {log}"


# Both figures of a dataset's clusters come from one job (one process start, not two).
rule figure_clusters:
    conda:
        CONDA_ENV
    input:
        "results/data/{dataset}.zarr",
        "results/{dataset}/classes.zarr",
    output:
        gallery=report(
            "results/figures/{dataset}_classes.png",
            caption="../report/classes.rst",
            category="Clusters",
            subcategory="{dataset}",
        ),
        stability=report(
            "results/figures/{dataset}_stability.png",
            caption="../report/stability.rst",
            category="Clusters",
            subcategory="{dataset}",
        ),
    log:
        "results/logs/figures/{dataset}_clusters.log",
    shell:
        "ia-stages stage figure clusters --inputs {input} --out {output.gallery} {output.stability}"
        " 2> {log}"
