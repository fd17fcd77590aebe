"""Kills, reruns and corrupted stores: nothing is lost, results are identical."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ia_stages.pipeline.store import read_store

from .test_workflow import TINY

pytestmark = pytest.mark.slow  # runs the workflow end to end

ROOT = Path(__file__).resolve().parents[1]
# TINY with IA on one dataset for one iteration: the whole pipeline, figures included, in 23 jobs
SMALL = {
    **TINY,
    "ia": {**TINY["ia"], "datasets": ["shapes3"], "iterations": 1},
    "ka": {**TINY["ka"], "datasets": ["shapes3", "blobs"]},
}
TIMING = ["wall_seconds"]  # the only columns allowed to differ between runs


def snakemake(work: Path, *args: str, wait: bool = True, timeout: float | None = None):
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
    if not wait:
        return subprocess.Popen(
            cmd,
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    return subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=timeout)


def fresh(tmp_path: Path, name: str, config: dict = SMALL) -> Path:
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


def assert_same_results(a: Path, b: Path) -> None:
    """Every store's data and every table agree (timings excepted)."""
    assert stores(a) == stores(b)
    for rel in stores(a):
        x, y = read_store(a / rel), read_store(b / rel)
        assert set(x.data_vars) == set(y.data_vars), rel
        for v in x.data_vars:
            if v == "seconds":
                continue
            np.testing.assert_array_equal(x[v].values, y[v].values, err_msg=str(rel / v))
    for rel in [
        "results/tables/summary.csv",
        *[p.relative_to(a) for p in (a / "results").glob("*/metrics.csv")],
    ]:
        ta, tb = pd.read_csv(a / rel), pd.read_csv(b / rel)
        pd.testing.assert_frame_equal(ta.drop(columns=TIMING), tb.drop(columns=TIMING))
    for fig in (a / "results/figures").glob("*.png"):
        assert (b / "results/figures" / fig.name).stat().st_size > 0


@pytest.fixture
def reference(small_reference):
    """A finished run of SMALL (tests/conftest.py: one run for this module and the SLURM test)."""
    return small_reference


def finished_jobs(work: Path) -> int:
    logs = sorted((work / ".snakemake" / "log").glob("*.snakemake.log"))
    return logs[-1].read_text().count("Finished jobid") if logs else 0


def test_kill_and_resume_gives_identical_results(reference, tmp_path):
    """kill -9 the whole run after 6 jobs finished (others are then writing their stores),
    then unlock and rerun with --rerun-incomplete: every store and table equals the reference
    run's, so the jobs the rerun computed afresh are also deterministic (one run per feature:
    a separate second full run and a kill during the first jobs added no other check)."""
    work = fresh(tmp_path, "killed")
    proc = snakemake(work, wait=False)
    deadline = time.monotonic() + 120
    while finished_jobs(work) < 6 and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert snakemake(work, "--unlock").returncode == 0
    rerun = snakemake(work, "--rerun-incomplete")
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert_same_results(reference, work)
    leftovers = [p for p in (work / "results").rglob(".*tmp-*")]
    assert leftovers == []


def test_corrupted_block_store_is_named_and_repaired_by_rerunning_it(reference, tmp_path):
    work = tmp_path / "corrupt"  # a finished run: a copy of the reference, times kept
    shutil.copytree(reference, work, symlinks=True)
    assert "Nothing to be done" in snakemake(work).stderr
    block = work / "results/shapes3/ia/iter0/kmax/0_1.zarr"
    (block / "value" / "zarr.json").write_text("{ truncated")
    gather = snakemake(
        work, "--forcerun", "kmax_gather", "--until", "kmax_gather", "--show-failed-logs"
    )
    assert gather.returncode != 0
    assert "results/shapes3/ia/iter0/kmax/0_1.zarr" in gather.stderr
    fixed = snakemake(work, "--forcerun", str(block.relative_to(work)))
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    assert_same_results(reference, work)
