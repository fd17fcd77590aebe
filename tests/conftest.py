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
