"""Shared fixtures: the repository's config schema and its default configuration."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The longest files first. pytest-xdist (--dist loadfile --no-loadscope-reorder) hands whole
# files to the workers in collection order, so a long file collected last would run alone at the
# end of the suite. (Its default order, most tests first, put the workflow files last.)
LONGEST_FIRST = (
    "test_workflow.py",  # makes tiny_reference, which test_slurm.py waits for
    "test_benchmark_workflow.py",
    "test_slurm.py",
    "test_trust.py",
    "test_workflow_knn.py",
    "test_install.py",  # one test, but a whole run whose jobs compile every kernel again
    "test_cluster_command.py",
    "test_robustness.py",
    "test_kmax_cuda.py",
)


def pytest_configure(config) -> None:
    """Compile numba's cached kernels once before any test or job runs (tests/warm_numba.py):
    on a fresh clone the workers and the workflows' jobs would otherwise each compile them, at
    the same time. In the controller only: xdist's workers find the cache made."""
    if hasattr(config, "workerinput") or config.option.collectonly or config.option.help:
        return
    subprocess.run([sys.executable, "-m", "tests.warm_numba"], cwd=ROOT, check=True)


def pytest_collection_modifyitems(config, items) -> None:
    """Order the collected files: LONGEST_FIRST, then the others by their number of tests, most
    first (xdist's own order). A stable sort: each file keeps the order of its tests."""
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    count = Counter(item.path.name for item in items)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -count[item.path.name]))


@pytest.fixture(scope="package")
def schema_path() -> Path:
    """Absolute path of the package's workflow/schemas/config.schema.yaml."""
    return ROOT / "src" / "ia_stages" / "pipeline" / "workflow" / "schemas" / "config.schema.yaml"


@pytest.fixture
def default_config() -> dict:
    """config/config.yaml as parsed YAML (a fresh dict for every test, safe to modify)."""
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture(scope="package")
def tiny_reference(tmp_path_factory, worker_id) -> Path:
    """A finished run of .test/config/tiny.yaml (written as ``tiny.yaml`` in the run's folder),
    shared by the workflow tests that read it and by those that compare another run with it.
    Under pytest-xdist the first worker to ask makes it in the test run's shared temporary
    folder and the others wait for it (a lock), so the run is made once per test run."""
    from .test_workflow import TINY, run_workflow

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if worker_id != "master" else base) / "tiny_reference"
    root.mkdir(exist_ok=True)
    work, done = root / "run", root / "done"
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            (work / "tiny.yaml").write_text(yaml.safe_dump(TINY))
            run_workflow(work, work / "tiny.yaml")
            done.touch()
    return work
