"""More bad input: infinite pixels, blocks of different datasets, features of another shape."""

import json

import numpy as np
import pytest
import xarray as xr

from ia_stages.pipeline.cli import main
from ia_stages.pipeline.config import STAGE_SETTINGS
from ia_stages.pipeline.store import write_store
from ia_stages.settings import Settings

TREE = Settings.from_dict(
    {"beta": 1.0, "sigma": 0.0, "search": {"n_angles": 8, "max_shift": 2, "n_candidates": 1,
                                           "refine_iters": 2}}
)  # fmt: skip
SETTINGS = json.dumps(
    {"seed": 0, "backend": "numpy", "dataset": "x", "settings": TREE.subset(STAGE_SETTINGS["kmax"])}
)


def features(path, n=3, size=12, fill=None):
    x = np.random.default_rng(0).random((n, size, size))
    if fill is not None:
        x[1, 2, 3] = fill
    write_store(xr.Dataset({"features": (("sample", "y", "x"), x)}), path)
    return path


def kmax_block(src, out, block_size="8"):
    """Run the kmax-block stage on one diagonal block; returns the exit code."""
    return main(
        [
            "stage",
            "kmax-block",
            "--features",
            str(src),
            "--block",
            "0",
            "0",
            "--block-size",
            block_size,
            "--settings",
            SETTINGS,
            "--out",
            str(out),
        ]
    )


def run(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_pixels_are_named(tmp_path, capsys, bad):
    src = features(tmp_path / "f.zarr", fill=bad)
    out = tmp_path / "out" / "b.zarr"
    code = kmax_block(src, out, "4")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not out.exists()
    assert err[-1].startswith("ia-stages stage kmax-block: error:")
    assert str(src) in err[-1] and "sample 1" in err[-1]


def test_gathering_blocks_of_different_datasets_fails(tmp_path, capsys):
    a = features(tmp_path / "a.zarr", n=4)
    b = features(tmp_path / "b.zarr", n=6)
    blocks = []
    for src, name in ((a, "a"), (b, "b")):
        out = tmp_path / f"{name}_0_0.zarr"
        assert kmax_block(src, out) == 0
        blocks.append(str(out))
    capsys.readouterr()
    out = tmp_path / "gathered.zarr"
    code, err = run(
        ["stage", "kmax-gather", "--blocks", *blocks, "--settings", SETTINGS, "--out", str(out)],
        capsys,
    )
    assert code == 2 and not out.exists()
    assert blocks[1] in err[-1] and "n=6" in err[-1]


def test_means_with_features_of_a_different_size_than_kmax(tmp_path, capsys):
    src = features(tmp_path / "f.zarr", n=3)
    km = tmp_path / "k.zarr"
    assert kmax_block(src, km) == 0
    other = features(tmp_path / "g.zarr", n=5)
    capsys.readouterr()
    out = tmp_path / "m.zarr"
    tree = Settings.from_dict({"attention": {"kind": "dense"}, "mean": {"steps": 1}})
    settings = json.dumps(
        {"seed": 0, "backend": "numpy", "dataset": "x",
         "settings": tree.subset(STAGE_SETTINGS["means"])}
    )  # fmt: skip
    code, err = run(
        [
            "stage",
            "means",
            "--features",
            str(other),
            "--kmax",
            str(km),
            "--settings",
            settings,
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 2 and not out.exists()
    assert str(km) in err[-1]
