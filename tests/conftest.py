"""Shared fixtures: the repository's config schema and its default configuration."""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The longest files first. pytest-xdist (--dist loadfile) hands whole files to the workers in
# collection order, so a long file collected last would run alone at the end of the suite.
LONGEST_FIRST = (
    "test_slurm.py",
    "test_workflow.py",
    "test_trust.py",
    "test_benchmark_workflow.py",
    "test_cluster_command.py",
    "test_group_tables.py",
    "test_workflow_knn.py",
    "test_robustness.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    """Order the collected tests by LONGEST_FIRST (a stable sort: each file keeps its order)."""
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def schema_path() -> Path:
    """Absolute path of the package's workflow/schemas/config.schema.yaml."""
    return ROOT / "src" / "ia_stages" / "pipeline" / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def default_config() -> dict:
    """config/config.yaml as parsed YAML (a fresh dict for every test, safe to modify)."""
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture(scope="session")
def small_reference(tmp_path_factory, worker_id) -> Path:
    """A finished local run of the small workflow config (tests/test_robustness.py's SMALL),
    shared by the tests that compare another run of it with this one. Under pytest-xdist the
    first worker to ask makes it in the session's shared temporary folder and the others wait
    for it (a lock), so the run is made once per session, not once per worker."""
    from .test_robustness import fresh, snakemake

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if worker_id != "master" else base) / "small_reference"
    root.mkdir(exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        work, done = root / "ref" / "run", root / "done"
        if not done.exists():
            shutil.rmtree(root / "ref", ignore_errors=True)
            (root / "ref").mkdir()
            work = fresh(root / "ref", "run")
            proc = snakemake(work)
            assert proc.returncode == 0, proc.stderr[-2000:]
            done.touch()
    return work
