"""The Snakemake pipeline's Python side: the `ia-stages` command, config and schema checks, stores
with provenance, GPU pinning, and one module per stage."""
