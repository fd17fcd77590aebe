"""Tests for the zarr store I/O: round trips, atomic replacement, errors and provenance."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ia_stages import __version__
from ia_stages.pipeline.store import (
    StoreError,
    config_hash,
    provenance,
    read_store,
    write_store,
    write_text_atomic,
)

SETTINGS = {"seed": 7, "beta": 2.5, "search": {"n_angles": 8, "max_shift": None}}


def _dataset(seed: int = 0, n: int = 3) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    ds = xr.Dataset(
        {
            "features": (("sample", "y", "x"), rng.normal(size=(n, 5, 4))),
            "label": (("sample",), np.arange(n, dtype=np.int64)),
            "params": (("sample", "param"), rng.normal(size=(n, 3))),
        },
        coords={"sample": np.arange(n), "param": ["theta", "b0", "b1"]},
    )
    ds.attrs = provenance("test", SETTINGS, 7, "numpy", block=[0, 1], wall_seconds=1.5)
    return ds


def _siblings(path: Path) -> list[str]:
    return sorted(os.listdir(path.parent))


def test_round_trip_preserves_values_dims_and_attrs(tmp_path: Path) -> None:
    ds = _dataset()
    path = write_store(ds, tmp_path / "a.zarr")
    assert path == tmp_path / "a.zarr"
    back = read_store(path, required=("features", "label"))
    assert back["features"].dims == ("sample", "y", "x")
    assert back["params"].dims == ("sample", "param")
    for name in ("features", "label", "params"):
        np.testing.assert_array_equal(back[name].values, ds[name].values)
        assert back[name].dtype == ds[name].dtype
    assert list(back["param"].values) == ["theta", "b0", "b1"]
    assert back.attrs == ds.attrs


def test_provenance_attributes(tmp_path: Path) -> None:
    back = read_store(write_store(_dataset(), tmp_path / "a.zarr"))
    attrs = back.attrs
    assert attrs["stage"] == "test"
    assert attrs["config_hash"] == config_hash(SETTINGS)
    assert attrs["ia_stages_version"] == __version__
    assert attrs["seed"] == 7 and attrs["backend"] == "numpy"
    assert datetime.fromisoformat(attrs["created"]).tzinfo is not None
    assert json.loads(attrs["settings"]) == SETTINGS
    assert attrs["block"] == [0, 1] and attrs["wall_seconds"] == 1.5


def test_write_store_replaces_an_existing_store(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    write_store(_dataset(seed=0, n=3), path)
    new = _dataset(seed=1, n=5).drop_vars("params")
    new["extra"] = ("sample", np.ones(5))
    write_store(new, path)
    back = read_store(path)
    assert "params" not in back.variables  # replaced, not merged
    assert back.sizes["sample"] == 5
    np.testing.assert_array_equal(back["features"].values, new["features"].values)
    np.testing.assert_array_equal(back["extra"].values, np.ones(5))
    assert _siblings(path) == ["a.zarr"]  # no .a.zarr.tmp-* left behind


def test_write_store_creates_parent_folders_and_no_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "b.zarr"
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "keep.txt").write_text("x")
    write_store(_dataset(), path)
    assert read_store(path).sizes["sample"] == 3
    assert _siblings(path) == ["b.zarr"]
    assert (tmp_path / "deep" / "keep.txt").read_text() == "x"


def test_invalid_dataset_leaves_old_store_and_no_temporaries(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    old = _dataset(seed=0)
    write_store(old, path)
    bad = _dataset(seed=1)
    bad.attrs["unserialisable"] = object()
    with pytest.raises(TypeError):
        write_store(bad, path)
    np.testing.assert_array_equal(read_store(path)["features"].values, old["features"].values)
    assert _siblings(path) == ["a.zarr"]


def test_failed_rename_removes_the_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written completely under its temporary name is cleaned up if the final rename
    fails, so no half-finished store is left beside the target."""
    import ia_stages.pipeline.store as store

    real_replace = os.replace
    path = tmp_path / "a.zarr"
    calls = []

    def fail(src, dst):
        if Path(dst) == path:
            calls.append(Path(src).name)
            raise OSError("rename failed")
        real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", fail)
    with pytest.raises(OSError, match="rename failed"):
        write_store(_dataset(), path)
    assert len(calls) == 1 and calls[0].startswith(".a.zarr.tmp-")
    assert os.listdir(tmp_path) == []


def test_read_store_missing_path(tmp_path: Path) -> None:
    path = tmp_path / "missing.zarr"
    with pytest.raises(StoreError) as info:
        read_store(path)
    assert str(path) in str(info.value)


def test_read_store_folder_of_garbage(tmp_path: Path) -> None:
    path = tmp_path / "junk.zarr"
    path.mkdir()
    (path / "notes.txt").write_text("not a zarr store")
    with pytest.raises(StoreError) as info:
        read_store(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("member", ["zarr.json", "features/zarr.json"])
def test_read_store_truncated_metadata(tmp_path: Path, member: str) -> None:
    path = write_store(_dataset(), tmp_path / "a.zarr")
    meta = path / member
    meta.write_text(meta.read_text()[:25])
    with pytest.raises(StoreError) as info:
        read_store(path)
    assert str(path) in str(info.value)


def test_read_store_missing_required_variable(tmp_path: Path) -> None:
    path = write_store(_dataset(), tmp_path / "a.zarr")
    with pytest.raises(StoreError) as info:
        read_store(path, required=("features", "weights", "sqdist"))
    msg = str(info.value)
    assert str(path) in msg and "weights" in msg and "sqdist" in msg
    assert "features" not in msg.split("lacks", 1)[-1]


def test_read_store_loads_into_memory(tmp_path: Path) -> None:
    """The returned dataset does not depend on the files any more (it was loaded)."""
    path = write_store(_dataset(), tmp_path / "a.zarr")
    back = read_store(path)
    expected = back["features"].values.copy()
    write_store(_dataset(seed=5), path)
    np.testing.assert_array_equal(back["features"].values, expected)


def test_config_hash_ignores_key_order_and_tracks_values() -> None:
    a = {"beta": 1.0, "search": {"n_angles": 8, "max_shift": 2}, "seed": 0}
    b = {"seed": 0, "search": {"max_shift": 2, "n_angles": 8}, "beta": 1.0}
    assert config_hash(a) == config_hash(b)
    h = config_hash(a)
    assert len(h) == 16 and int(h, 16) >= 0
    assert config_hash({**a, "beta": 1.5}) != h
    assert config_hash({**a, "search": {"n_angles": 9, "max_shift": 2}}) != h
    assert config_hash({**a, "extra": None}) != h


def test_provenance_hash_matches_settings() -> None:
    p1 = provenance("kmax-block", SETTINGS, 3, "numpy")
    p2 = provenance("kmax-block", dict(reversed(list(SETTINGS.items()))), 3, "numpy")
    assert p1["config_hash"] == p2["config_hash"] == config_hash(SETTINGS)
    assert p1["seed"] == 3 and isinstance(p1["seed"], int)


def test_a_writer_killed_mid_write_leaves_nothing_after_the_next_write(tmp_path: Path) -> None:
    """What a killed writer left beside a store or a text file (its temporary, the old store it
    had moved aside) goes with the next write of that path; other paths' are kept."""
    path = tmp_path / "a.zarr"
    write_store(_dataset(seed=0), path)
    (tmp_path / ".a.zarr.tmp-0badf00d" / "features").mkdir(parents=True)
    (tmp_path / ".a.zarr.old-0badf00d").mkdir()
    (tmp_path / ".b.zarr.tmp-0badf00d").mkdir()  # another store's: not ours to remove
    (tmp_path / ".t.md.tmp-0badf00d").write_text("half")
    write_store(_dataset(seed=1), path)
    write_text_atomic("whole\n", tmp_path / "t.md")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.zarr.tmp-0badf00d", "a.zarr", "t.md"]
    new = _dataset(seed=1)["features"].values
    np.testing.assert_array_equal(read_store(path)["features"].values, new)


def test_write_text_atomic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "t.md"
    write_text_atomic("one\n", path)
    write_text_atomic("two\n", path)
    assert path.read_text() == "two\n"
    assert _siblings(path) == ["t.md"]
