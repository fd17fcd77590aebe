# ia-stages: Invariant Attention pipeline. Run with `snakemake --cores all`.
# The workflow ships inside the package (src/ia_stages/pipeline/workflow/), so that an installed
# `ia-stages cluster` finds it too; this file only adds the repository's default config.


configfile: "config/config.yaml"


include: "src/ia_stages/pipeline/workflow/Snakefile"


rule default:
    # `default_target` is only honoured in the Snakefile that snakemake reads first
    input:
        rules.all.input,
    default_target: True
