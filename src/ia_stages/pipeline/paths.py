"""Where the workflow shipped inside the package lies (the stage commands read these without
loading the configuration's validator)."""

from __future__ import annotations

from pathlib import Path

WORKFLOW_DIR = Path(__file__).resolve().parent / "workflow"
"""The workflow shipped inside the package: Snakefile, rules, schemas, report captions."""
SNAKEFILE = WORKFLOW_DIR / "Snakefile"
SCHEMA = WORKFLOW_DIR / "schemas" / "config.schema.yaml"
