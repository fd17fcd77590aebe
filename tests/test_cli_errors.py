"""The command line on bad input: exit status 2, one ``ia-stages <stage>: error:`` line naming
the culprit, and no output (not even a half-written one) beside untouched unrelated files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ia_stages.pipeline.cli import STAGES, main
from ia_stages.pipeline.config import STAGE_SETTINGS
from ia_stages.pipeline.store import read_store, write_store
from ia_stages.settings import Settings

SEARCH = {"n_angles": 8, "max_shift": 2, "coarse_sigma": 1.0, "n_candidates": 1, "refine_iters": 3}
TREE = Settings.from_dict(
    {"beta": 1.0, "sigma": 0.0, "search": SEARCH, "attention": {"kind": "dense"},
     "mean": {"steps": 2, "sigmas": [0.0]}}
)  # fmt: skip
KMAX_SETTINGS = {
    "seed": 0,
    "backend": "numpy",
    "dataset": "x",
    "settings": TREE.subset(STAGE_SETTINGS["kmax"]),
}
MEANS_SETTINGS = {
    "seed": 0,
    "backend": "numpy",
    "dataset": "x",
    "settings": TREE.subset(STAGE_SETTINGS["means"]),
}
UNRELATED = "unrelated.txt"


def _features(path: Path, n: int = 4, size: int = 16, nan_at: int | None = None) -> Path:
    rng = np.random.default_rng(1)
    f = np.zeros((n, size, size))
    f[:, 4:12, 5:11] = rng.uniform(0.5, 1.0, (n, 8, 6))
    if nan_at is not None:
        f[nan_at, 3, 3] = np.nan
    ds = xr.Dataset(
        {"features": (("sample", "y", "x"), f), "label": (("sample",), np.arange(n) % 2)},
        coords={"sample": np.arange(n)},
    )
    return write_store(ds, path)


def _kmax(path: Path, n: int) -> Path:
    ds = xr.Dataset(
        {
            "value": (("sample_i", "sample_j"), np.eye(n)),
            "params": (("sample_i", "sample_j", "param"), np.zeros((n, n, 3))),
            "sqdist": (("sample_i", "sample_j"), np.zeros((n, n))),
        }
    )
    return write_store(ds, path)


def _metrics_csv(path: Path, dataset: str) -> Path:
    pd.DataFrame(
        {"dataset": [dataset], "method": ["IA"], "iteration": [1], "accuracy": [1.0]}
    ).to_csv(path, index=False)
    return path


@dataclass
class Case:
    stage: str
    argv: list[str]
    outputs: list[Path] = field(default_factory=list)
    needles: list[str] = field(default_factory=list)


def _out(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / UNRELATED).write_text("keep me\n")
    return out


def _kmax_argv(features: Path, out: Path, block=(0, 0), settings: str | None = None) -> list:
    return [
        "stage",
        "kmax-block",
        "--features",
        str(features),
        "--block",
        str(block[0]),
        str(block[1]),
        "--block-size",
        "2",
        "--settings",
        json.dumps(KMAX_SETTINGS) if settings is None else settings,
        "--out",
        str(out),
    ]


def _bad_config(tmp_path: Path, schema_path: Path) -> Case:
    cfg = yaml.safe_load((schema_path.parents[5] / "config" / "config.yaml").read_text())
    cfg["datasets"]["shapes3"]["n_per_class"] = "six"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    argv = ["check-config", str(path), "--schema", str(schema_path)]
    return Case("check-config", argv, [], ["datasets.shapes3.n_per_class"])


def _features_missing(tmp_path: Path, schema_path: Path) -> Case:
    out = _out(tmp_path) / "k.zarr"
    missing = tmp_path / "nowhere" / "features.zarr"
    return Case("kmax-block", _kmax_argv(missing, out), [out], [str(missing)])


def _features_nan(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", nan_at=2)
    out = _out(tmp_path) / "k.zarr"
    return Case("kmax-block", _kmax_argv(feats, out), [out], [str(feats), "NaN"])


def _features_not_images(tmp_path: Path, schema_path: Path) -> Case:
    feats = tmp_path / "points.zarr"
    write_store(xr.Dataset({"features": (("sample", "dim"), np.zeros((4, 2)))}), feats)
    out = _out(tmp_path) / "k.zarr"
    return Case("kmax-block", _kmax_argv(feats, out), [out], [str(feats), "(sample, y, x)"])


def _block_too_far(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)  # block size 2 -> blocks 0, 1
    out = _out(tmp_path) / "k.zarr"
    return Case("kmax-block", _kmax_argv(feats, out, block=(0, 2)), [out], [str(feats), "(0, 2)"])


def _block_lower_triangle(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    out = _out(tmp_path) / "k.zarr"
    return Case("kmax-block", _kmax_argv(feats, out, block=(1, 0)), [out], [str(feats), "(1, 0)"])


def _settings_not_json(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr")
    out = _out(tmp_path) / "k.zarr"
    argv = _kmax_argv(feats, out, settings='{"seed": 0, "beta":')
    return Case("kmax-block", argv, [out], ["--settings", "JSON"])


def _settings_not_object(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr")
    out = _out(tmp_path) / "k.zarr"
    argv = _kmax_argv(feats, out, settings="[1, 2]")
    return Case("kmax-block", argv, [out], ["--settings", "object"])


def _unknown_backend(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr")
    out = _out(tmp_path) / "k.zarr"
    argv = _kmax_argv(feats, out, settings=json.dumps({**KMAX_SETTINGS, "backend": "tpu"}))
    return Case("kmax-block", argv, [out], ["tpu"])


def _means_argv(feats: Path, kmax: Path) -> list[str]:
    settings = json.dumps(MEANS_SETTINGS)
    return ["stage", "means", "--features", str(feats), "--kmax", str(kmax), "--settings", settings]


def _means_kmax_shape(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = _kmax(tmp_path / "kmax.zarr", n=3)
    out = _out(tmp_path) / "means.zarr"
    argv = [*_means_argv(feats, kmax), "--out", str(out)]
    return Case("means", argv, [out], [str(kmax), "n=4"])


def _means_kmax_missing(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = tmp_path / "no-kmax.zarr"
    out = _out(tmp_path) / "means.zarr"
    argv = [*_means_argv(feats, kmax), "--out", str(out)]
    return Case("means", argv, [out], [str(kmax)])


def _means_kmax_lacks_variable(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = tmp_path / "kmax.zarr"
    write_store(xr.Dataset({"value": (("sample_i", "sample_j"), np.eye(4))}), kmax)
    out = _out(tmp_path) / "means.zarr"
    argv = [*_means_argv(feats, kmax), "--out", str(out)]
    return Case("means", argv, [out], [str(kmax), "params"])


def _memory_budget_too_small(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    out = _out(tmp_path) / "k.zarr"
    search = {**KMAX_SETTINGS["settings"]["search"], "memory_mb": 1e-3}
    tree = {**KMAX_SETTINGS["settings"], "search": search}
    argv = _kmax_argv(feats, out, settings=json.dumps({**KMAX_SETTINGS, "settings": tree}))
    return Case("kmax-block", argv, [out], ["search.memory_mb", "block_size"])


def _means_block_out_of_range(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = _kmax(tmp_path / "kmax.zarr", n=4)
    out = _out(tmp_path) / "means.zarr"
    argv = [*_means_argv(feats, kmax), "--block", "2", "--block-size", "2", "--out", str(out)]
    return Case("means", argv, [out], [str(feats), "column block 2"])


def _means_gather_gap(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = _kmax(tmp_path / "kmax.zarr", n=4)
    block0 = tmp_path / "m0.zarr"
    assert main([*_means_argv(feats, kmax), "--block-size", "2", "--out", str(block0)]) == 0
    out = _out(tmp_path) / "features.zarr"
    settings = json.dumps(MEANS_SETTINGS)
    argv = ["stage", "means-gather", "--blocks", str(block0), "--kmax", str(kmax)]
    argv += ["--settings", settings, "--out", str(out)]
    return Case("means-gather", argv, [out], [str(out), "column 2 missing"])


def _kmax_whole_features_nan(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", nan_at=2)
    out = _out(tmp_path) / "kmax.zarr"
    argv = [
        "stage",
        "kmax-whole",
        "--features",
        str(feats),
        "--settings",
        json.dumps(KMAX_SETTINGS),
    ]
    return Case("kmax-whole", [*argv, "--out", str(out)], [out], [str(feats), "NaN"])


def _means_whole_kmax_shape(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr", n=4)
    kmax = _kmax(tmp_path / "kmax.zarr", n=3)
    out = _out(tmp_path) / "features.zarr"
    argv = ["stage", "means-whole", *_means_argv(feats, kmax)[2:], "--out", str(out)]
    return Case("means-whole", argv, [out], [str(kmax), "n=4"])


def _tables_with(make_bad: Callable[[Path], Path]):
    def case(tmp_path: Path, schema_path: Path) -> Case:
        good = _metrics_csv(tmp_path / "good.csv", "a")
        bad = make_bad(tmp_path)
        out = _out(tmp_path)
        csv, md = out / "summary.csv", out / "summary.md"
        argv = [
            "stage",
            "tables",
            "--metrics",
            str(good),
            str(bad),
            "--csv",
            str(csv),
            "--md",
            str(md),
        ]
        return Case("tables", argv, [csv, md], [str(bad)])

    return case


def _empty_file(tmp_path: Path) -> Path:
    path = tmp_path / "empty.csv"
    path.write_text("")
    return path


def _folder(tmp_path: Path) -> Path:
    path = tmp_path / "folder.csv"
    path.mkdir()
    return path


def _figure_outputs_short(tmp_path: Path, schema_path: Path) -> Case:
    feats = _features(tmp_path / "features.zarr")
    out = _out(tmp_path) / "gallery.png"
    argv = ["stage", "figure", "clusters", "--inputs", str(feats), str(feats), "--out", str(out)]
    return Case("figure", argv, [out], ["clusters", "--out takes 2"])


def _stability_of_an_older_store(tmp_path: Path, schema_path: Path) -> Case:
    # a store without the read-out's stability curve (as an older classes stage wrote)
    store = _features(tmp_path / "classes.zarr")
    out = _out(tmp_path) / "stability.png"
    argv = ["stage", "figure", "stability", "--inputs", str(store), "--out", str(out)]
    return Case("figure", argv, [out], [str(store), "classes stage"])


CASES: dict[str, Callable[[Path, Path], Case]] = {
    "check-config bad value": _bad_config,
    "kmax-block features missing": _features_missing,
    "kmax-block features NaN": _features_nan,
    "kmax-block features not images": _features_not_images,
    "kmax-block block out of range": _block_too_far,
    "kmax-block block below diagonal": _block_lower_triangle,
    "kmax-block settings not JSON": _settings_not_json,
    "kmax-block settings not an object": _settings_not_object,
    "kmax-block unknown backend": _unknown_backend,
    "means kmax shape mismatch": _means_kmax_shape,
    "means kmax missing": _means_kmax_missing,
    "means kmax lacks variable": _means_kmax_lacks_variable,
    "kmax-block memory budget too small": _memory_budget_too_small,
    "means column block out of range": _means_block_out_of_range,
    "means-gather blocks leave a gap": _means_gather_gap,
    "kmax-whole features NaN": _kmax_whole_features_nan,
    "means-whole kmax shape mismatch": _means_whole_kmax_shape,
    "tables metrics missing": _tables_with(lambda tmp_path: tmp_path / "absent.csv"),
    "tables metrics empty": _tables_with(_empty_file),
    "tables metrics folder": _tables_with(_folder),
    "figure clusters one output": _figure_outputs_short,
    "figure stability store without the curve": _stability_of_an_older_store,
}


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.name: (p.read_bytes() if p.is_file() else b"<folder>", p.stat().st_mtime_ns)
        for p in folder.iterdir()
    }


@pytest.mark.parametrize("name", list(CASES), ids=list(CASES))
def test_bad_input_exits_2_with_one_error_line_and_writes_nothing(
    name: str, tmp_path: Path, schema_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = CASES[name](tmp_path, schema_path)
    out_dir = tmp_path / "out"
    before = _snapshot(out_dir) if out_dir.exists() else {}
    capsys.readouterr()

    assert main(case.argv) == 2

    err = capsys.readouterr().err
    command = f"stage {case.stage}" if case.stage in STAGES else case.stage
    prefix = f"ia-stages {command}: error: "
    error_lines = [line for line in err.splitlines() if line.startswith(prefix)]
    assert len(error_lines) == 1, err
    assert err.rstrip("\n").splitlines()[-1] == error_lines[0], err
    assert "Traceback" not in err
    for needle in case.needles:
        assert needle in error_lines[0], (needle, error_lines[0])
    for path in case.outputs:
        assert not path.exists(), path
    if out_dir.exists():
        # the unrelated file is untouched and nothing else (no temporary store) appeared
        assert _snapshot(out_dir) == before


@pytest.mark.parametrize("content", ["seed: six\ndatasets: {}\n", "seed: [1,\nbackend: }\n"])
def test_check_config_error_is_a_single_stderr_line(
    content: str, tmp_path: Path, schema_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(content)
    assert main(["check-config", str(path), "--schema", str(schema_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("ia-stages check-config: error: ")


def test_check_config_accepts_the_default_config(
    schema_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = schema_path.parents[5] / "config" / "config.yaml"
    assert main(["check-config", str(config), "--schema", str(schema_path)]) == 0
    assert capsys.readouterr().out.strip() == f"{config}: valid"


def test_console_script_exit_status(tmp_path: Path, schema_path: Path) -> None:
    exe = shutil.which("ia-stages")
    assert exe is not None, "the ia-stages console script is not installed"
    case = _bad_config(tmp_path, schema_path)
    proc = subprocess.run(
        [exe, *case.argv], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ia-stages check-config: error: ")
    assert "datasets.shapes3.n_per_class" in lines[0]


def test_tables_writes_both_outputs_and_leaves_unrelated_file(tmp_path: Path) -> None:
    a = _metrics_csv(tmp_path / "a.csv", "a")
    b = _metrics_csv(tmp_path / "b.csv", "b")
    out = _out(tmp_path)
    before = (out / UNRELATED).stat().st_mtime_ns
    csv, md = out / "summary.csv", out / "summary.md"
    assert (
        main(["stage", "tables", "--metrics", str(a), str(b), "--csv", str(csv), "--md", str(md)])
        == 0
    )
    assert list(pd.read_csv(csv)["dataset"]) == ["a", "b"]
    rows = [line.split("|")[1].strip() for line in md.read_text().splitlines() if line[:2] == "| "]
    assert rows == ["dataset", "a", "b"]
    assert (out / UNRELATED).read_text() == "keep me\n"
    assert (out / UNRELATED).stat().st_mtime_ns == before
    assert sorted(os.listdir(out)) == sorted([UNRELATED, "summary.csv", "summary.md"])


def test_kmax_block_valid_input_writes_the_block(tmp_path: Path) -> None:
    """Positive control for the error cases: the same command with good input succeeds."""
    feats = _features(tmp_path / "features.zarr", n=3, size=16)
    out_dir = _out(tmp_path)
    out = out_dir / "k.zarr"
    assert main(_kmax_argv(feats, out, block=(0, 1))) == 0
    ds = read_store(out, required=("value", "params", "sqdist"))
    assert ds["value"].shape == (2, 1)
    assert list(ds["sample_i"].values) == [0, 1] and list(ds["sample_j"].values) == [2]
    assert np.all((ds["value"].values > 0) & (ds["value"].values <= 1))
    assert ds.attrs["block"] == [0, 1] and ds.attrs["backend"] == "numpy"
    assert sorted(os.listdir(out_dir)) == ["k.zarr", UNRELATED]


@pytest.mark.parametrize(
    ("argv", "prog", "needle"),
    [
        (["cluster", "x", "--backend", "tpu"], "ia-stages cluster", "invalid choice: 'tpu'"),
        (["cluster", "x", "--out", "o", "--cores", "two"], "ia-stages cluster", "--cores"),
        (["stage", "kmax-block", "--bogus"], "ia-stages stage kmax-block", "required: --features"),
        (["nosuch"], "ia-stages", "invalid choice: 'nosuch'"),
    ],
)
def test_a_usage_error_is_one_line_with_exit_status_2(argv, prog, needle, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{prog}: error:"), err
    assert needle in err[0] and err[0].endswith(f"(see {prog} --help)")
