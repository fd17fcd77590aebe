"""End to end: the Snakemake workflow on a tiny config, through the Snakemake API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from ia_stages.pipeline.cluster_command import snakemake
from ia_stages.pipeline.stages import kmax_gather, means
from ia_stages.pipeline.stages.metrics import COLUMNS
from ia_stages.pipeline.store import read_store

pytestmark = pytest.mark.slow  # runs the workflow end to end

ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / ".test" / "config" / "tiny.yaml").read_text())
FIGURES = [
    "fig2_ka_blobs.png",
    "fig3_dataset_ka_means.png",
    "fig4_ia_weights_means.png",
    "fig5_invariant_mean.png",
]


def run_workflow(workdir: Path, configfile: Path, targets: list[str] | None = None) -> None:
    """Run the workflow (up to ``targets``, default all): the runner `ia-stages cluster` uses."""
    snakemake(ROOT / "Snakefile", workdir, configfile, targets or [], cores=2)


def mtimes(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def tiny_run(tiny_reference):
    """The finished run of TINY (tests/conftest.py), and its config file."""
    return tiny_reference, tiny_reference / "tiny.yaml"


def test_table_has_every_method_iteration_and_column(tiny_run):
    work, _ = tiny_run
    table = pd.read_csv(work / "results/tables/summary.csv")
    assert list(table.columns) == COLUMNS
    rows = set(zip(table.dataset, table.method, table.iteration, strict=True))
    expected = {(d, "KA", t) for d in ("shapes3", "mnist3", "blobs") for t in range(3)}
    # mnist3 sets its own iterations (2) beside the top-level settings' (1)
    expected |= {("shapes3", "IA", t) for t in range(2)} | {("mnist3", "IA", t) for t in range(3)}
    # read out into K = the number of classes: shapes3 (3 shapes); mnist3 has one class
    expected |= {("shapes3", "IA (K)", t) for t in range(2)}
    assert rows == expected
    assert table[["acc", "nmi", "block_diagonality"]].apply(lambda c: c.between(0, 1)).all().all()
    ia = table[(table.dataset == "shapes3") & (table.method == "IA")]
    assert (ia.acc == 1.0).all() and (ia.clusters_found == 3).all()
    md = (work / "results/tables/summary.md").read_text()
    assert "| shapes3" in md and "block-diag" in md


def test_figures_are_written(tiny_run):
    work, _ = tiny_run
    for name in FIGURES:
        with Image.open(work / "results/figures" / name) as im:
            assert im.format == "PNG" and min(im.size) > 300


def test_clusters_csv_and_gallery_of_every_ia_dataset(tiny_run):
    work, _ = tiny_run
    table = pd.read_csv(work / "results/shapes3/clusters.csv")
    data = read_store(work / "results/data/shapes3.zarr")
    assert len(table) == data.sizes["sample"]
    names = [str(c) for c in data["class_name"].values]
    assert table.label.tolist() == [names[k] for k in data["label"].values]
    assert table.groupby("label").cluster.nunique().eq(1).all()  # one cluster per shape
    assert table.cluster.nunique() == 3
    for d in ("shapes3", "mnist3"):
        for kind in ("classes", "stability"):
            with Image.open(work / f"results/figures/{d}_{kind}.png") as im:
                assert im.format == "PNG"


def test_stores_carry_dims_and_provenance(tiny_run):
    work, _ = tiny_run
    ds = read_store(work / "results/data/shapes3.zarr")
    assert ds["features"].dims == ("sample", "y", "x") and ds["params"].dims == ("sample", "param")
    km = read_store(work / "results/shapes3/ia/iter0/kmax.zarr")
    assert km["value"].dims == ("sample_i", "sample_j")
    for key in ("config_hash", "ia_stages_version", "seed", "backend", "created"):
        assert key in ds.attrs and key in km.attrs
    assert km.attrs["blocks"] == 3 and km.attrs["stage"] == "kmax-gather"


def test_a_single_block_dataset_runs_each_stage_in_one_job(tiny_run):
    """mnist3's 4 images are one block of 4: kmax-whole and means-whole write the iteration's
    stores directly, with no block store and no gather."""
    work, _ = tiny_run
    res = work / "results/mnist3/ia"
    for t in (0, 1, 2):  # mnist3's own 2 iterations
        km = read_store(res / f"iter{t}/kmax.zarr")
        assert km.attrs["stage"] == "kmax-whole" and km.attrs["pairs"] == 6
        assert km.attrs["cpu_seconds"] > 0 and km["value"].shape == (4, 4)
    for t in (1, 2):
        assert read_store(res / f"iter{t}/features.zarr").attrs["stage"] == "means-whole"
    assert not (res / "iter0/kmax").exists() and not (res / "iter1/means").exists()
    # shapes3 runs the top-level settings' iterations (1): no second iteration's stores
    assert (work / "results/shapes3/ia/iter1").exists()
    assert not (work / "results/shapes3/ia/iter2").exists()


def test_sharded_kmax_equals_the_whole_job(tiny_run, tmp_path):
    work, _ = tiny_run
    gathered = read_store(work / "results/shapes3/ia/iter1/kmax.zarr")
    settings = json.loads(gathered.attrs["settings"])  # exactly what the block jobs used
    assert gathered.attrs["blocks"] == 3
    one = kmax_gather.whole(
        work / "results/shapes3/ia/iter1/features.zarr", tmp_path / "one.zarr", settings
    )
    np.testing.assert_allclose(gathered["value"].values, one["value"].values, rtol=1e-9)
    np.testing.assert_allclose(gathered["params"].values, one["params"].values, atol=1e-9)
    np.testing.assert_allclose(gathered["sqdist"].values, one["sqdist"].values, rtol=1e-9)


def test_sharded_means_equal_the_whole_job(tiny_run, tmp_path):
    work, _ = tiny_run
    res = work / "results/shapes3/ia"
    gathered = read_store(res / "iter1/features.zarr")
    assert gathered.attrs["blocks"] == 2  # 6 columns in blocks of 4
    settings = json.loads(gathered.attrs["settings"])
    one = means.whole(
        work / "results/data/shapes3.zarr", res / "iter0/kmax.zarr", tmp_path / "m.zarr", settings
    )
    for key in ("features", "mean_params", "objective", "weights"):
        np.testing.assert_array_equal(gathered[key].values, one[key].values, key)
    np.testing.assert_allclose(one["weights"].values.sum(0), 1.0)  # column-normalised


def test_rerun_does_nothing(tiny_run):
    work, cfg = tiny_run
    before = mtimes(work / "results")
    run_workflow(work, cfg)
    assert mtimes(work / "results") == before


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"settings": {"iterations": "two"}}, "settings': iterations must be an integer"),
        ({"datasets": {"shapes3": {"kind": "triangles"}}}, "datasets.shapes3.kind"),
        ({"block_size": 0}, "block_size"),
        ({"settings": {"readout": {"threshold": float("nan")}}}, "settings.readout.threshold"),
    ],
)
def test_bad_config_fails_in_one_line_and_touches_nothing(tiny_run, tmp_path, change, key):
    work, _ = tiny_run
    bad = {**TINY, **change}
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    before = mtimes(work / "results")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "1",
            "-s",
            str(ROOT / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        cwd=work,
    )
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ia-stages:")]
    assert len(errors) == 1 and key in errors[0], proc.stderr
    assert mtimes(work / "results") == before
