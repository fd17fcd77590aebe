"""Shared fixtures: the repository's config schema and its default configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def schema_path() -> Path:
    """Absolute path of the package's workflow/schemas/config.schema.yaml."""
    return ROOT / "src" / "ia_stages" / "pipeline" / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def default_config() -> dict:
    """config/config.yaml as parsed YAML (a fresh dict for every test, safe to modify)."""
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture(scope="session")
def small_reference(tmp_path_factory) -> Path:
    """A finished local run of the small workflow config (tests/test_robustness.py's SMALL),
    shared by the tests that compare another run of it with this one."""
    from .test_robustness import fresh, snakemake

    work = fresh(tmp_path_factory.mktemp("ref"), "run")
    proc = snakemake(work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return work
