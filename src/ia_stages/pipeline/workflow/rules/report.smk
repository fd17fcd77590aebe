rule metrics:
    conda:
        CONDA_ENV
    input:
        unpack(metrics_inputs),
    output:
        "results/{dataset}/metrics.csv",
    params:
        settings=settings("metrics"),
        args=lambda w, input: metrics_args(w, input),
    threads: heavy_threads
    log:
        "results/logs/{dataset}/metrics.log",
    shell:
        "ia-stages stage metrics --dataset {input.dataset} {params.args} --threads {threads}"
        " --settings {params.settings} --out {output} 2> {log}"


rule tables:
    conda:
        CONDA_ENV
    input:
        expand("results/{dataset}/metrics.csv", dataset=sorted(set(IA_DATASETS + KA_DATASETS))),
    output:
        csv=report(
            "results/tables/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
        ),
        md="results/tables/summary.md",
    log:
        "results/logs/tables.log",
    shell:
        "ia-stages stage tables --metrics {input} --csv {output.csv} --md {output.md} 2> {log}"


rule mean_trace:
    conda:
        CONDA_ENV
    input:
        "results/data/{dataset}.zarr",
    output:
        directory("results/{dataset}/mean_trace.zarr"),
    params:
        settings=settings("mean_trace"),
    log:
        "results/logs/{dataset}/mean_trace.log",
    shell:
        "ia-stages stage mean-trace --dataset {input} --settings {params.settings} --out {output}"
        " 2> {log}"


rule fig2:
    conda:
        CONDA_ENV
    input:
        f"results/data/{FIGS['blobs']}.zarr",
        f"results/{FIGS['blobs']}/ka/iterations.zarr",
    output:
        report(FIGURE_FILES["fig2"], caption="../report/fig2.rst", category="Figures"),
    log:
        "results/logs/figures/fig2.log",
    shell:
        "ia-stages stage figure fig2 --inputs {input} --out {output} 2> {log}"


rule fig3:
    conda:
        CONDA_ENV
    input:
        f"results/data/{FIGS['shapes']}.zarr",
        f"results/{FIGS['shapes']}/ka/iterations.zarr",
    output:
        report(FIGURE_FILES["fig3"], caption="../report/fig3.rst", category="Figures"),
    log:
        "results/logs/figures/fig3.log",
    shell:
        "ia-stages stage figure fig3 --inputs {input} --out {output} 2> {log}"


rule fig4:
    conda:
        CONDA_ENV
    input:
        expand(
            "results/{dataset}/ia/iter{t}/features.zarr",
            dataset=FIGS["shapes"],
            t=range(1, min(ia_iters(FIGS["shapes"]), 2) + 1) if FIGS["shapes"] else [],
        ),
    output:
        report(FIGURE_FILES["fig4"], caption="../report/fig4.rst", category="Figures"),
    log:
        "results/logs/figures/fig4.log",
    shell:
        "ia-stages stage figure fig4 --inputs {input} --out {output} 2> {log}"


rule fig5:
    conda:
        CONDA_ENV
    input:
        f"results/data/{FIGS['mean_trace']['dataset']}.zarr",
        f"results/{FIGS['mean_trace']['dataset']}/mean_trace.zarr",
    output:
        report(FIGURE_FILES["fig5"], caption="../report/fig5.rst", category="Figures"),
    log:
        "results/logs/figures/fig5.log",
    shell:
        "ia-stages stage figure fig5 --inputs {input} --out {output} 2> {log}"
