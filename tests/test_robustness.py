"""A corrupted store is named and repaired by rerunning it; the helpers that run the tiny
workflow config by the ``snakemake`` command (``kill -9`` and resume: tests/test_trust.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ia_stages.pipeline.store import read_store

from .test_workflow import TINY

pytestmark = pytest.mark.slow  # runs the workflow end to end

ROOT = Path(__file__).resolve().parents[1]
TIMING = ["wall_seconds"]  # the only columns allowed to differ between runs


def snakemake(work: Path, *args: str, timeout: float | None = None):
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--cores",
        "2",
        "-s",
        str(ROOT / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(work / "tiny.yaml"),
        *args,
    ]
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)


def fresh(tmp_path: Path, name: str, config: dict = TINY) -> Path:
    work = tmp_path / name
    work.mkdir()
    (work / "tiny.yaml").write_text(yaml.safe_dump(config))
    return work


def stores(work: Path) -> list[Path]:
    return sorted(
        p.relative_to(work)
        for p in (work / "results").rglob("*.zarr")
        if p.is_dir() and (p / "zarr.json").exists()
    )


def assert_same_stores(a: Path, b: Path, rels: list[Path]) -> None:
    """The stores ``rels`` (relative paths) of runs ``a`` and ``b`` hold the same variables
    with equal values, their ``seconds`` excepted."""
    for rel in rels:
        x, y = read_store(a / rel), read_store(b / rel)
        assert set(x.data_vars) == set(y.data_vars), rel
        for v in set(x.data_vars) - {"seconds"}:
            np.testing.assert_array_equal(x[v].values, y[v].values, err_msg=str(rel / v))


def assert_same_results(a: Path, b: Path) -> None:
    """Every store's data and every table agree (timings excepted)."""
    assert stores(a) == stores(b)
    assert_same_stores(a, b, stores(a))
    for rel in [
        "results/tables/summary.csv",
        *[p.relative_to(a) for p in (a / "results").glob("*/metrics.csv")],
    ]:
        ta, tb = pd.read_csv(a / rel), pd.read_csv(b / rel)
        pd.testing.assert_frame_equal(ta.drop(columns=TIMING), tb.drop(columns=TIMING))
    for fig in (a / "results/figures").glob("*.png"):
        assert (b / "results/figures" / fig.name).stat().st_size > 0


@pytest.fixture
def reference(tiny_reference):
    """A finished run of TINY (tests/conftest.py: one run for the workflow tests)."""
    return tiny_reference


def test_corrupted_block_store_is_named_and_repaired_by_rerunning_it(reference, tmp_path):
    work = tmp_path / "corrupt"  # a finished run: a copy of the reference, times kept
    # the reference's own tests may hold its lock while this copies it
    shutil.copytree(reference, work, symlinks=True, ignore=shutil.ignore_patterns("locks"))
    assert "Nothing to be done" in snakemake(work).stderr
    block = work / "results/shapes3/ia/iter0/kmax/0_1.zarr"
    (block / "value" / "zarr.json").write_text("{ truncated")
    gather = snakemake(
        work, "--forcerun", "kmax_gather", "--until", "kmax_gather", "--show-failed-logs"
    )
    assert gather.returncode != 0
    assert "results/shapes3/ia/iter0/kmax/0_1.zarr" in gather.stderr
    # recompute the named block and its gather (the target) only: the stores after them are
    # not rerun, so every store, the repaired two included, must equal the reference run's
    gathered = "results/shapes3/ia/iter0/kmax.zarr"
    fixed = snakemake(work, f"--forcerun={block.relative_to(work)}", gathered)
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert fixed.stderr.count("Finished jobid") == 2, fixed.stderr[-2000:]
    assert_same_results(reference, work)
