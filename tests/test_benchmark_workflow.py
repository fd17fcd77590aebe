"""The clustering benchmark end to end on a tiny config, through the Snakemake API (targets:
Tables 1-3 only): every method x dataset row, a row per group where affnist also runs under
the affine group, rerunning the stages gives bit-identical CSV tables, the
report shows the tables, bad input fails in one line and loses nothing."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ia_stages.benchmark.methods import METHODS
from ia_stages.pipeline.benchmark_config import data_of
from ia_stages.pipeline.cli import main
from ia_stages.pipeline.stages import bench_tables, run_method
from ia_stages.pipeline.stages.bench_tables import NOT_RUN, REPORTED
from ia_stages.pipeline.store import read_store, write_store

from .test_workflow import ROOT, mtimes, run_workflow

pytestmark = pytest.mark.slow  # runs the workflow end to end

BENCH_TINY = yaml.safe_load((ROOT / ".test" / "config" / "bench_tiny.yaml").read_text())
N = BENCH_TINY["datasets"]["mnist_rot"]["n"]
TABLES = [f"results/tables/{t}.csv" for t in ("clustering", "theory", "cost")]
FIGURE = "results/figures/benchmark_acc.png"


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench")
    cfg = work / "bench.yaml"
    cfg.write_text(yaml.safe_dump(BENCH_TINY))
    run_workflow(work, cfg, [*TABLES, FIGURE])
    return work, cfg


def test_table1_has_every_method_on_every_dataset_and_the_reported_rows(bench_run):
    work, _ = bench_run
    t1 = pd.read_csv(work / "results/tables/clustering.csv")
    ours = t1[t1.origin == "run here"]
    per_iter = ours[ours.method.str.contains("@")]
    ours = ours[~ours.method.str.contains("@")]
    assert set(zip(ours.dataset, ours.method, strict=True)) == {
        (d, m) for d in ("mnist_rot", "affnist") for m in METHODS
    }
    # IA's read-outs also appear once per iteration 0..T (T = 1 here)
    assert set(zip(per_iter.dataset, per_iter.method, strict=True)) == {
        (d, f"{m}@iter{t}")
        for d in ("mnist_rot", "affnist")
        for m in ("ia", "ia_k")
        for t in (0, 1)
    }
    for m, meth in METHODS.items():
        runs = ours[ours.method == m].runs.astype(int)
        assert (runs == (2 if meth.randomized else 1)).all(), m
    assert ours[["acc_mean", "nmi_mean"]].apply(lambda c: c.between(0, 1)).all().all()
    assert (ours[ours.method.isin(["kmeans", "ia_k", "ti_kmeans"])].clusters_found <= N).all()
    assert set(ours[ours.dataset == "affnist"].source) == {"affNIST-style (regenerated)"}
    reported = t1[t1.origin == NOT_RUN]
    assert len(reported) == len(REPORTED)
    assert reported.acc_mean.round(3).tolist() == [round(r[3] / 100, 3) for r in REPORTED]
    md = (work / "results/tables/clustering.md").read_text()
    assert "not run here" in md and "TI K-means" in md and "wall s" in md
    assert "\\begin{table}" in (work / "results/tables/clustering.tex").read_text()


def test_table2_and_table3_rows(bench_run):
    work, _ = bench_run
    t2 = pd.read_csv(work / "results/tables/theory.csv")
    assert set(zip(t2.dataset, t2.iteration, strict=True)) == {
        (d, t) for d in ("mnist_rot", "affnist") for t in (0, 1)
    }
    assert (t2.R > 0).all()
    first = t2[t2.iteration == 0]
    assert np.allclose(first.R_ratio, t2[t2.iteration == 1].R.values / first.R.values)
    assert first.restart_max_distance.notna().all()
    t3 = pd.read_csv(work / "results/tables/cost.csv")
    blocks = t3[t3.stage == "kmax-whole"]  # n = 10: one block, one job
    assert (blocks.us_per_pair > 0).all() and (t3.peak_rss_mb > 0).all()
    assert set(t3[t3.stage == "cluster"].detail) == set(METHODS)


def test_group_rows_of_tables_1_to_3(bench_run):
    """affnist under benchmark.groups' se2 and affine: Table 1 has a row per group
    for the methods that use one and one row for the others, Tables 2 and 3 a row set per
    group; the variants read their base dataset's images (no dataset store of their own)."""
    work, _ = bench_run
    groups = ("se2", "affine")  # similarity is a variant as affine is (test_group_tables.py)
    t1 = pd.read_csv(work / TABLES[0])
    ours = t1[(t1.origin == "run here") & ~t1.method.str.contains("@") & (t1.dataset == "affnist")]
    expected = set()
    for m, meth in METHODS.items():
        kind = meth.transforms
        gs = groups if kind == "group" else ("se2",) if kind == "se2" else ("-",)
        expected |= {(m, g) for g in gs}
    assert set(zip(ours.method, ours.group, strict=True)) == expected
    assert ours.n.eq(N).all() and ours.acc_mean.between(0, 1).all()
    t2 = pd.read_csv(work / TABLES[1])
    t2 = t2[t2.dataset == "affnist"]
    assert set(zip(t2.group, t2.iteration, strict=True)) == {(g, t) for g in groups for t in (0, 1)}
    first = t2[t2.iteration == 0]
    assert (first.rendered_floor > 0).all() and first.kmax_inv_err_rendered_value.notna().all()
    t3 = pd.read_csv(work / TABLES[2])
    blocks = t3[(t3.stage == "kmax-whole") & (t3.dataset == "affnist")]
    assert set(zip(blocks.group, blocks.detail, strict=True)) == {
        (g, f"iter{t}") for g in groups for t in (0, 1)
    }
    assert (blocks.cpu_us_per_pair > 0).all() and blocks.cpu_ratio_to_se2.notna().all()
    assert (blocks[blocks.group == "se2"].cpu_ratio_to_se2 == 1).all()
    stores = sorted(p.name for p in (work / "results/data").iterdir())
    assert stores == ["affnist.zarr", "mnist_rot.zarr"]  # the tables' datasets, no variant


def test_rerunning_every_method_gives_a_bit_identical_table1(bench_run, tmp_path):
    work, _ = bench_run
    runs = sorted((work / "results").glob("*/cluster/*/seed*.zarr"))
    per_dataset = sum(2 if m.randomized else 1 for m in METHODS.values())
    per_variant = sum(2 if m.randomized else 1 for m in METHODS.values() if m.transforms == "group")
    assert len(runs) == 2 * per_dataset + per_variant  # affnist@affine
    again = []
    for path in runs:
        st = read_store(path)
        dname = json.loads(st.attrs["settings"])["dataset"]
        kmax = None
        needs = METHODS[st.attrs["method"]].needs
        if needs != "none":
            kmax = [work / f"results/{dname}/ia/iter{t}/kmax.zarr" for t in (0, 1)]
            kmax = kmax[:1] if needs == "kmax0" else kmax
        out = tmp_path / dname / path.parent.name / path.name
        rerun = run_method.run(
            work / f"results/data/{data_of(dname)}.zarr",
            out,
            json.loads(st.attrs["settings"]),
            kmax,
        )
        np.testing.assert_array_equal(rerun["pred"].values, st["pred"].values, str(path))
        again.append(out)
    data = [work / f"results/data/{d}.zarr" for d in ("mnist_rot", "affnist")]
    bench_tables.clustering(again, data, tmp_path / "clustering")
    a = (work / "results/tables/clustering.csv").read_bytes()
    assert a == (tmp_path / "clustering.csv").read_bytes()


def test_report_shows_the_three_tables_with_captions(bench_run):
    work, cfg = bench_run
    out = work / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
         str(work), "--configfile", str(cfg), "--report", str(out), *TABLES, FIGURE],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = out.read_text(errors="replace")
    for name in ("clustering.csv", "theory.csv", "cost.csv", "Table 1:", "Table 2:", "Table 3:"):
        assert name in html, name
    assert "benchmark_acc.png" in html and "as a bar chart" in html


def _settings(work):
    return read_store(work / "results/mnist_rot/cluster/kmeans/seed0.zarr").attrs["settings"]


def test_cluster_on_a_store_without_labels_fails_in_one_line(bench_run, tmp_path, capsys):
    work, _ = bench_run
    ds = read_store(work / "results/data/mnist_rot.zarr")
    write_store(ds.drop_vars("label"), tmp_path / "nolabel.zarr")
    out = tmp_path / "out.zarr"
    rc = main(["stage", "run-method", "--dataset", str(tmp_path / "nolabel.zarr"), "--settings",
               _settings(work), "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert err[-1].startswith("ia-stages stage run-method: error:") and "nolabel.zarr" in err[-1]
    assert "label" in err[-1]


def test_a_batch_with_fewer_stores_than_settings_fails_in_one_line(bench_run, tmp_path, capsys):
    work, _ = bench_run
    out = tmp_path / "one.zarr"
    rc = main(["stage", "run-method", "--dataset", str(work / "results/data/mnist_rot.zarr"),
               "--settings", _settings(work), _settings(work), "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert "--settings gives 2 jobs but --out 1 stores" in err[-1]


def test_cluster_with_more_clusters_than_samples_fails_in_one_line(bench_run, tmp_path, capsys):
    work, _ = bench_run
    ds = read_store(work / "results/data/mnist_rot.zarr")
    small = ds.isel(sample=slice(0, 2))
    small["label"] = xr.DataArray(np.array([0, 1]), dims="sample")
    write_store(small, tmp_path / "two.zarr")
    settings = _settings(work).replace('"n_clusters": null', '"n_clusters": 5')
    rc = main(["stage", "run-method", "--dataset", str(tmp_path / "two.zarr"),
               "--settings", settings, "--out", str(tmp_path / "o.zarr")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "n_clusters=5" in err[-1] and "two.zarr" in err[-1]


def test_bad_benchmark_config_touches_nothing(bench_run, tmp_path):
    work, _ = bench_run
    bad = copy.deepcopy(BENCH_TINY)
    bad["benchmark"]["n_clusters"] = N + 1
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    before = mtimes(work / "results")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", "-s", str(ROOT / "Snakefile"),
         "--directory", str(work), "--configfile", str(cfg)],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ia-stages:")]
    assert len(errors) == 1 and "benchmark.n_clusters" in errors[0], proc.stderr
    assert mtimes(work / "results") == before
