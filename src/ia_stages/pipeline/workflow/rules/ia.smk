rule kmax_block:
    conda:
        CONDA_ENV
    input:
        features_of,
    output:
        directory("results/{dataset}/ia/iter{t}/kmax/{bi}_{bj}.zarr"),
    params:
        settings=settings("kmax"),
        block_size=config["block_size"],
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("kmax"),
    log:
        "results/logs/{dataset}/ia/iter{t}/kmax_{bi}_{bj}.log",
    shell:
        "ia-stages stage kmax-block --features {input} --block {wildcards.bi} {wildcards.bj}"
        " --block-size {params.block_size} --threads {threads} --settings {params.settings}"
        " --out {output} 2> {log}"


rule kmax_gather:
    wildcard_constraints:
        dataset=KMAX_BLOCKED,
    conda:
        CONDA_ENV
    input:
        kmax_block_stores,
    output:
        directory("results/{dataset}/ia/iter{t}/kmax.zarr"),
    params:
        settings=settings("kmax"),
    log:
        "results/logs/{dataset}/ia/iter{t}/kmax_gather.log",
    shell:
        "ia-stages stage kmax-gather --blocks {input} --settings {params.settings} --out {output}"
        " 2> {log}"


# A dataset whose kappa^max is one block: one job computes and writes the n x n store (no
# block store, no gather job).
rule kmax_whole:
    wildcard_constraints:
        dataset=KMAX_WHOLE,
    conda:
        CONDA_ENV
    input:
        features_of,
    output:
        directory("results/{dataset}/ia/iter{t}/kmax.zarr"),
    params:
        settings=settings("kmax"),
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("kmax"),
    log:
        "results/logs/{dataset}/ia/iter{t}/kmax.log",
    shell:
        "ia-stages stage kmax-whole --features {input} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


# The kNN path (a dataset's settings path.mode: candidates): no n x n store. A dataset whose rows
# are one block (rows_per_job null, the default) computes each iteration's kNN store in
# one job (knn_whole); the others: global features once, row-block jobs refine their rows'
# candidates, the gather merges them into the kNN store (the same store).
rule knn_whole:
    wildcard_constraints:
        dataset=KNN_WHOLE,
    conda:
        CONDA_ENV
    input:
        images=features_of,
        previous=previous_lists,
    output:
        directory("results/{dataset}/ia/iter{t}/knn.zarr"),
    params:
        settings=settings("knn"),
        previous=lambda w, input: f"--previous {input.previous}" if input.previous else "",
    resources:
        gpu=gpu_per_job("knn"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/ia/iter{t}/knn.log",
    shell:
        "ia-stages stage knn-whole --images {input.images} {params.previous} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


rule knn_features:
    wildcard_constraints:
        dataset=KNN_BLOCKED,
    conda:
        CONDA_ENV
    input:
        images=features_of,
        previous=previous_lists,
    output:
        directory("results/{dataset}/ia/iter{t}/knn_features.zarr"),
    params:
        settings=settings("knn"),
        previous=lambda w, input: f"--previous {input.previous}" if input.previous else "",
    resources:
        gpu=gpu_per_job("knn"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/ia/iter{t}/knn_features.log",
    shell:
        "ia-stages stage knn-features --images {input.images} {params.previous} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


rule knn_block:
    wildcard_constraints:
        dataset=KNN_BLOCKED,
    conda:
        CONDA_ENV
    input:
        images=features_of,
        features="results/{dataset}/ia/iter{t}/knn_features.zarr",
    output:
        directory("results/{dataset}/ia/iter{t}/knn/{bi}.zarr"),
    params:
        settings=settings("knn"),
        rows=lambda w: knn_rows_per_job(config, w.dataset),
    resources:
        gpu=gpu_per_job("knn"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/ia/iter{t}/knn_{bi}.log",
    shell:
        "ia-stages stage knn-block --images {input.images} --features {input.features}"
        " --block {wildcards.bi} --rows {params.rows} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


# With path.features.screen or n_expand > 0: the first round's lists, then row blocks of the
# second pass (knn_expand: screened lists refined exactly, neighbours' neighbours), then
# knn_gather merges both rounds' pairs.
rule knn_first:
    wildcard_constraints:
        dataset=KNN_BLOCKED,
    conda:
        CONDA_ENV
    input:
        blocks=knn_block_stores,
        features="results/{dataset}/ia/iter{t}/knn_features.zarr",
    output:
        directory("results/{dataset}/ia/iter{t}/knn_first.zarr"),
    params:
        settings=settings("knn"),
    log:
        "results/logs/{dataset}/ia/iter{t}/knn_first.log",
    shell:
        "ia-stages stage knn-gather --blocks {input.blocks} --features {input.features}"
        " --settings {params.settings} --out {output} 2> {log}"


rule knn_expand:
    wildcard_constraints:
        dataset=KNN_BLOCKED,
    conda:
        CONDA_ENV
    input:
        images=features_of,
        first="results/{dataset}/ia/iter{t}/knn_first.zarr",
        blocks=knn_block_stores,
    output:
        directory("results/{dataset}/ia/iter{t}/knn_expand/{bi}.zarr"),
    params:
        settings=settings("knn"),
        rows=lambda w: knn_rows_per_job(config, w.dataset),
    resources:
        gpu=gpu_per_job("knn"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/ia/iter{t}/knn_expand_{bi}.log",
    shell:
        "ia-stages stage knn-expand --images {input.images} --first {input.first}"
        " --blocks {input.blocks} --block {wildcards.bi} --rows {params.rows}"
        " --threads {threads} --settings {params.settings} --out {output} 2> {log}"


rule knn_gather:
    wildcard_constraints:
        dataset=KNN_BLOCKED,
    conda:
        CONDA_ENV
    input:
        images=features_of,
        blocks=knn_pair_stores,
        features="results/{dataset}/ia/iter{t}/knn_features.zarr",
    output:
        directory("results/{dataset}/ia/iter{t}/knn.zarr"),
    params:
        settings=settings("knn"),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/ia/iter{t}/knn_gather.log",
    shell:
        "ia-stages stage knn-gather --blocks {input.blocks} --features {input.features}"
        " --images {input.images} --threads {threads} --settings {params.settings}"
        " --out {output} 2> {log}"


rule means_block:
    conda:
        CONDA_ENV
    input:
        features=previous_features,
        kmax=previous_kmax,
    output:
        directory("results/{dataset}/ia/iter{t}/means/{cb}.zarr"),
    params:
        settings=settings("means"),
        block_size=lambda w: means_block_size(config, w.dataset),
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("means"),
    log:
        "results/logs/{dataset}/ia/iter{t}/means_{cb}.log",
    shell:
        "ia-stages stage means --features {input.features} --kmax {input.kmax} --block {wildcards.cb}"
        " --block-size {params.block_size} --threads {threads} --settings {params.settings}"
        " --out {output} 2> {log}"


rule means_gather:
    wildcard_constraints:
        dataset=MEANS_BLOCKED,
    conda:
        CONDA_ENV
    input:
        blocks=means_block_stores,
        kmax=previous_kmax,
    output:
        directory("results/{dataset}/ia/iter{t}/features.zarr"),
    params:
        settings=settings("means"),
    log:
        "results/logs/{dataset}/ia/iter{t}/means_gather.log",
    shell:
        "ia-stages stage means-gather --blocks {input.blocks} --kmax {input.kmax}"
        " --settings {params.settings} --out {output} 2> {log}"


# A dataset whose columns are one block: one job computes every invariant mean and writes the
# iteration's features (no block store, no gather job).
rule means_whole:
    wildcard_constraints:
        dataset=MEANS_WHOLE,
    conda:
        CONDA_ENV
    input:
        features=previous_features,
        kmax=previous_kmax,
    output:
        directory("results/{dataset}/ia/iter{t}/features.zarr"),
    params:
        settings=settings("means"),
    threads: heavy_threads
    resources:
        gpu=gpu_per_job("means"),
    log:
        "results/logs/{dataset}/ia/iter{t}/means.log",
    shell:
        "ia-stages stage means-whole --features {input.features} --kmax {input.kmax}"
        " --threads {threads} --settings {params.settings} --out {output} 2> {log}"
