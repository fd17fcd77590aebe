# The clustering benchmark (Tables 1-3): every method on every benchmark dataset, per seed.


rule cluster:
    conda:
        CONDA_ENV
    input:
        unpack(cluster_inputs),
    output:
        directory("results/{dataset}/cluster/{method}/seed{seed}.zarr"),
    wildcard_constraints:
        method="|".join(HEAVY_METHODS),  # the light ones run in batches (below)
    params:
        settings=cluster_settings_arg,
        args=cluster_args,
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("cluster"),
    log:
        "results/logs/{dataset}/cluster/{method}_seed{seed}.log",
    shell:
        "ia-stages run-method --dataset {input.dataset} {params.args} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


# The light methods run in one job per dataset and input kind: pixels, the iteration-0
# kappa^max, or every iteration's (IA's read-outs). A settings edit reruns the whole batch.
if PIXEL_BATCH:

    rule cluster_pixels:
        conda:
            CONDA_ENV
        input:
            unpack(batch_inputs("none")),
        output:
            batch_outputs(PIXEL_BATCH),
        wildcard_constraints:
            dataset="|".join(re.escape(d) for d in BENCH_DATASETS),
        params:
            settings=batch_settings(PIXEL_BATCH),
        log:
            "results/logs/{dataset}/cluster/pixel_methods.log",
        shell:
            "ia-stages run-method --dataset {input.dataset} --threads 1"
            " --settings {params.settings} --out {output} 2> {log}"


if GRAPH_BATCH:

    rule cluster_graphs:
        conda:
            CONDA_ENV
        input:
            unpack(batch_inputs("kmax0")),
        output:
            batch_outputs(GRAPH_BATCH),
        params:
            settings=batch_settings(GRAPH_BATCH),
            args=cluster_args,
        log:
            "results/logs/{dataset}/cluster/graph_methods.log",
        shell:
            "ia-stages run-method --dataset {input.dataset} {params.args} --threads 1"
            " --settings {params.settings} --out {output} 2> {log}"


if IA_BATCH:

    rule cluster_ia:
        conda:
            CONDA_ENV
        input:
            unpack(batch_inputs("kmax_all")),
        output:
            batch_outputs(IA_BATCH),
        params:
            settings=batch_settings(IA_BATCH),
            args=cluster_args,
        threads: heavy_threads
        log:
            "results/logs/{dataset}/cluster/ia_methods.log",
        shell:
            "ia-stages run-method --dataset {input.dataset} {params.args} --threads {threads}"
            " --settings {params.settings} --out {output} 2> {log}"


rule theory:
    conda:
        CONDA_ENV
    input:
        dataset=lambda w: data_store(w.dataset),
        kmax=lambda w: ia_stores(w.dataset)[0],
        features=lambda w: ia_stores(w.dataset)[1],
    output:
        "results/{dataset}/theory.csv",
    params:
        settings=settings("theory"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/theory.log",
    shell:
        "ia-stages theory --dataset {input.dataset} --features {input.features}"
        " --kmax {input.kmax} --threads {threads} --settings {params.settings}"
        " --out {output} 2> {log}"


rule table_clustering:
    conda:
        CONDA_ENV
    input:
        runs=cluster_runs(),
        datasets=expand("results/data/{dataset}.zarr", dataset=BENCH_DATASETS),
    output:
        csv=report(
            "results/tables/clustering.csv",
            caption="../report/clustering.rst",
            category="Tables",
        ),
        md="results/tables/clustering.md",
        tex="results/tables/clustering.tex",
    log:
        "results/logs/tables/clustering.log",
    shell:
        "ia-stages bench-table clustering --inputs {input.runs} --datasets {input.datasets}"
        " --out-stem results/tables/clustering 2> {log}"


rule table_theory:
    conda:
        CONDA_ENV
    input:
        expand("results/{dataset}/theory.csv", dataset=BENCH_RUNS),
    output:
        csv=report(
            "results/tables/theory.csv",
            caption="../report/theory.rst",
            category="Tables",
        ),
        md="results/tables/theory.md",
        tex="results/tables/theory.tex",
    log:
        "results/logs/tables/theory.log",
    shell:
        "ia-stages bench-table theory --inputs {input} --out-stem results/tables/theory 2> {log}"


rule table_cost:
    conda:
        CONDA_ENV
    input:
        cost_stores,
    output:
        csv=report(
            "results/tables/cost.csv",
            caption="../report/cost.rst",
            category="Tables",
        ),
        md="results/tables/cost.md",
        tex="results/tables/cost.tex",
    log:
        "results/logs/tables/cost.log",
    shell:
        "ia-stages bench-table cost --inputs {input} --out-stem results/tables/cost 2> {log}"


rule figure_benchmark:
    conda:
        CONDA_ENV
    input:
        "results/tables/clustering.csv",
    output:
        report(
            "results/figures/benchmark_acc.png",
            caption="../report/benchmark_acc.rst",
            category="Figures",
        ),
    log:
        "results/logs/figures/benchmark_acc.log",
    shell:
        "ia-stages figure benchmark --inputs {input} --out {output} 2> {log}"
