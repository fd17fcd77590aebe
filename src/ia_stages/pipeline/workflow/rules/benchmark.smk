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
        dataset=one_of(set(BENCH_RUNS) - set(SMALL_BENCH)),  # small ones: all in batches
    params:
        settings=cluster_settings_arg,
        args=cluster_args,
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("cluster"),
    log:
        "results/logs/{dataset}/cluster/{method}_seed{seed}.log",
    shell:
        "ia-stages stage run-method --dataset {input.dataset} {params.args} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


# Batches (benchmark_common.smk, BATCHES): one job per dataset and input kind runs several
# methods: pixels, the iteration-0 kappa^max, or every iteration's (IA's read-outs). A
# settings edit reruns the whole batch. A `*_all` batch also holds the heavy methods.
for _name, (_need, _datasets, _batch) in BATCHES.items():
    if not (_batch and _datasets):
        continue
    _heavy = any(METHODS[m].heavy for m, _ in _batch)

    rule:
        name:
            _name
        conda:
            CONDA_ENV
        input:
            unpack(batch_inputs(_need)),
        output:
            batch_outputs(_batch),
        wildcard_constraints:
            dataset=one_of(_datasets),
        params:
            settings=batch_settings(_batch),
            args=cluster_args,
        # IA's read-outs spread their Leiden runs over the job's threads on large graphs
        threads: heavy_threads if _heavy or _need == "kmax_all" else 1
        # the pixel batches need only the dataset and are among the longest jobs: started
        # first, they overlap the kappa^max chains instead of running after them
        priority: 1 if _need == "none" else 0
        resources:
            gpu=gpu_per_job("cluster") if _heavy else 0,
        log:
            f"results/logs/{{dataset}}/cluster/{_name}.log",
        shell:
            "ia-stages stage run-method --dataset {input.dataset} {params.args} --threads {threads}"
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
        "ia-stages stage theory --dataset {input.dataset} --features {input.features}"
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
        "ia-stages stage bench-table clustering --inputs {input.runs} --datasets {input.datasets}"
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
        "ia-stages stage bench-table theory --inputs {input} --out-stem results/tables/theory 2> {log}"


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
        "ia-stages stage bench-table cost --inputs {input} --out-stem results/tables/cost 2> {log}"


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
        "ia-stages stage figure benchmark --inputs {input} --out {output} 2> {log}"
