# ia-stages: Invariant Attention pipeline. Run with `snakemake --cores all`.
# Wiring only: every rule calls one `ia-stages` sub-command; the logic lives in src/ia_stages.
import sys

from snakemake.utils import min_version

from ia_stages.config import ConfigError, validate_config

min_version("8.0")


configfile: "config/config.yaml"


try:
    config = validate_config(config, workflow.source_path("workflow/schemas/config.schema.yaml"))
except ConfigError as err:
    sys.exit(f"ia-stages: {err}")


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/ia.smk"
include: "workflow/rules/ka.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/classes.smk"
include: "workflow/rules/benchmark_common.smk"
include: "workflow/rules/benchmark.smk"


report: "workflow/report/workflow.rst"


rule all:
    input:
        rules.tables.output,
        FIGURES,
        CLASS_OUTPUTS,
        BENCH_TABLES if BENCH_DATASETS else [],
    default_target: True
