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
    resources:
        gpu=GPU_PER_JOB,
    log:
        "results/logs/{dataset}/ia/iter{t}/kmax_{bi}_{bj}.log",
    shell:
        "ia-stages kmax-block --features {input} --block {wildcards.bi} {wildcards.bj}"
        " --block-size {params.block_size} --settings {params.settings} --out {output} 2> {log}"


rule kmax_gather:
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
        "ia-stages kmax-gather --blocks {input} --settings {params.settings} --out {output}"
        " 2> {log}"


rule means:
    conda:
        CONDA_ENV
    input:
        features=previous_features,
        kmax=previous_kmax,
    output:
        directory("results/{dataset}/ia/iter{t}/features.zarr"),
    params:
        settings=settings("means"),
    resources:
        gpu=GPU_PER_JOB,
    log:
        "results/logs/{dataset}/ia/iter{t}/means.log",
    shell:
        "ia-stages means --features {input.features} --kmax {input.kmax}"
        " --settings {params.settings} --out {output} 2> {log}"
