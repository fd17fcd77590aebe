"""Command line: ``ia-stages cluster PATH --out DIR`` (the whole pipeline on a folder or stack
of images), ``ia-stages settings``, ``ia-stages check-config``, and ``ia-stages stage NAME
...``, one command per pipeline stage, which the workflow's rules run.

Errors in the input (config, stores, images, settings) print one line
``ia-stages <command>: error: ...`` and exit with status 2; anything else is a bug and shows
its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import yaml
from tqdm import tqdm

from ia_stages import __version__
from ia_stages.core.backend import BackendError
from ia_stages.data.loaders import LoaderError
from ia_stages.pipeline.errors import ConfigError, InputError
from ia_stages.pipeline.flags import add_settings_flags, settings_of_flags
from ia_stages.pipeline.job_progress import ProgressWriter
from ia_stages.pipeline.paths import SCHEMA
from ia_stages.pipeline.store import StoreError, store_sizes
from ia_stages.settings.spec import SettingError
from ia_stages.settings.tree import Settings

log = logging.getLogger("ia_stages")


def expected_errors() -> tuple[type[Exception], ...]:
    """The errors in the input (config, stores, images) that end a command in one line.

    DatasetError is imported here, not at the top: its module loads numba and scipy.ndimage,
    which a stage's job may not need."""
    from ia_stages.data.datasets import DatasetError  # lazy: see the docstring

    return (
        ConfigError, StoreError, InputError, DatasetError, LoaderError, BackendError,
        SettingError,
    )  # fmt: skip


_JOB_OUT: str | None = None
"""The running sub-command's ``--out`` (set by :func:`main`): the key of its progress file."""


@contextmanager
def _progress(total: int | None, desc: str):
    """A tqdm bar on stderr (plain log lines when stderr is not a terminal), and the same
    count in the job's progress file when ``ia-stages cluster`` asked for one
    (:mod:`ia_stages.pipeline.job_progress`)."""
    bar = tqdm(
        total=total,
        desc=desc,
        unit="it",
        file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
        ascii=not sys.stderr.isatty(),
    )
    writer = ProgressWriter(_JOB_OUT)

    def tick(k: int = 1) -> None:
        bar.update(k)
        writer.update(desc, bar.n, total)

    writer.update(desc, 0, total)
    try:
        yield tick
    finally:
        writer.close()
        bar.close()


def _settings(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--settings is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ConfigError("--settings must be a JSON object")
    return value


# lazy: each _cmd_ function imports its stage's module in its body, so that a job (one
# process per stage command) loads only its own stage's modules
def _cmd_dataset(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import dataset

    ds = dataset.run(_settings(a.settings), a.out)
    log.info("wrote %s: %d samples", a.out, ds.sizes["sample"])


@contextmanager
def _use_threads(n: int | None) -> Iterator[None]:
    """Run compiled kernels and scipy FFTs on at most ``n`` threads (None: numba's default,
    one FFT thread)."""
    if n is None:
        yield
        return
    if n < 1:
        raise ConfigError(f"--threads must be >= 1, got {n}")
    import numba  # lazy: numba and scipy.fft, for --threads only
    import scipy.fft

    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    with scipy.fft.set_workers(n):
        yield


def _cmd_kmax_block(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import kmax_block

    n = store_sizes(a.features).get("sample", 0)
    total = kmax_block.n_pairs(a.block[0], a.block[1], a.block_size, n)
    label = f"kappa^max block {a.block[0]},{a.block[1]}"
    with _use_threads(a.threads), _progress(total, label) as tick:
        ds = kmax_block.run(
            a.features, a.out, a.block[0], a.block[1], a.block_size, _settings(a.settings), tick
        )
    log.info("wrote %s: %d pairs in %.1f s", a.out, total, ds.attrs["wall_seconds"])


def _cmd_kmax_gather(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import kmax_gather

    ds = kmax_gather.run(a.blocks, a.out, _settings(a.settings))
    log.info(
        "wrote %s: %d x %d from %d blocks",
        a.out,
        ds.sizes["sample_i"],
        ds.sizes["sample_j"],
        len(a.blocks),
    )


def _cmd_kmax_whole(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import kmax_block, kmax_gather

    n = store_sizes(a.features).get("sample", 0)
    total = kmax_block.n_pairs(0, 0, max(n, 1), n)
    with _use_threads(a.threads), _progress(total, "kappa^max, every pair") as tick:
        ds = kmax_gather.whole(a.features, a.out, _settings(a.settings), tick)
    log.info("wrote %s: %d pairs in %.1f s", a.out, total, ds.attrs["wall_seconds"])


def _cmd_knn_features(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import knn

    with _use_threads(a.threads):
        ds = knn.features(a.images, a.out, _settings(a.settings), a.previous)
    log.info("wrote %s in %.1f s", a.out, ds.attrs["wall_seconds"])


def _cmd_knn_block(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import knn

    with _use_threads(a.threads), _progress(None, f"kNN row block {a.block}: pairs") as tick:
        ds = knn.block(a.images, a.features, a.out, a.block, a.rows, _settings(a.settings), tick)
    log.info("wrote %s: %d pairs in %.1f s", a.out, ds.sizes["pair"], ds.attrs["wall_seconds"])


def _cmd_knn_expand(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import knn

    with _use_threads(a.threads), _progress(None, f"kNN second pass {a.block}: pairs") as tick:
        ds = knn.expand(
            a.images, a.first, a.blocks, a.out, a.block, a.rows, _settings(a.settings), tick
        )
    log.info("wrote %s: %d pairs in %.1f s", a.out, ds.sizes["pair"], ds.attrs["wall_seconds"])


def _cmd_knn_gather(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import knn

    with _use_threads(a.threads):
        ds = knn.gather(a.blocks, a.features, a.out, _settings(a.settings), a.images)
    log.info("wrote %s: %d lists of %d from %d blocks", a.out, ds.sizes["sample"],
             ds.sizes["neighbour"], len(a.blocks))  # fmt: skip


def _cmd_knn_whole(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import knn

    with _use_threads(a.threads), _progress(None, "kNN path: pairs refined") as tick:
        ds = knn.whole(a.images, a.out, _settings(a.settings), a.previous, tick)
    log.info("wrote %s: %d lists of %d in %.1f s", a.out, ds.sizes["sample"],
             ds.sizes["neighbour"], ds.attrs["wall_seconds"])  # fmt: skip


def _cmd_means(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import means
    from ia_stages.pipeline.stages.kmax_block import block_range

    n = store_sizes(a.features).get("sample", 0)
    size = a.block_size or max(n, 1)
    total = len(block_range(a.block, size, n))
    label = f"invariant means, column block {a.block}"
    with _use_threads(a.threads), _progress(total, label) as tick:
        ds = means.run(
            a.features, a.kmax, a.out, _settings(a.settings), a.block, a.block_size, tick
        )
    log.info("wrote %s in %.1f s", a.out, ds.attrs["wall_seconds"])


def _cmd_means_gather(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import means

    ds = means.gather(a.blocks, a.kmax, a.out, _settings(a.settings))
    log.info("wrote %s: %d features from %d blocks", a.out, ds.sizes["sample"], len(a.blocks))


def _cmd_means_whole(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import means

    n = store_sizes(a.features).get("sample", 0)
    with _use_threads(a.threads), _progress(n, "invariant means, every column") as tick:
        ds = means.whole(a.features, a.kmax, a.out, _settings(a.settings), tick)
    log.info("wrote %s: %d features in %.1f s", a.out, n, ds.attrs["wall_seconds"])


def _cmd_ka(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import ka

    s = _settings(a.settings)
    with _progress(s["iterations"] + 1, "kernel attention diagnostics") as tick:
        ka.run(a.dataset, a.out, s, tick)
    log.info("wrote %s", a.out)


def _cmd_mean_trace(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import mean_trace

    ds = mean_trace.run(a.dataset, a.out, _settings(a.settings))
    log.info("wrote %s in %.1f s", a.out, ds.attrs["wall_seconds"])


def _cmd_metrics(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import metrics

    with _use_threads(a.threads):  # the read-outs with K of large graphs: one process each
        df = metrics.run(
            a.dataset, a.out, _settings(a.settings), a.ia_features, a.ia_kmax, a.ka, a.classes
        )
    log.info("wrote %s: %d rows", a.out, len(df))


def _cmd_tables(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import tables

    try:
        tables.run(a.metrics, a.csv, a.md)
    except ValueError as err:
        raise InputError(str(err)) from None
    log.info("wrote %s and %s", a.csv, a.md)


def _cmd_run_method(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import run_method as cluster

    if len(a.settings) != len(a.out):
        raise ConfigError(
            f"--settings gives {len(a.settings)} jobs but --out {len(a.out)} stores; "
            "give one store per settings object, in the same order"
        )
    jobs = [(_settings(s), out) for s, out in zip(a.settings, a.out, strict=True)]
    with _use_threads(a.threads):
        stores = cluster.run_batch(a.dataset, jobs, a.kmax, a.upstream)
    for (_, out), ds in zip(jobs, stores, strict=True):
        log.info(
            "wrote %s: %s found %d clusters in %.1f s",
            out,
            ds.attrs["method"],
            len(set(ds["pred"].values.tolist())),
            ds.attrs["wall_seconds"],
        )


def _cmd_classes(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import classes

    with _use_threads(a.threads):
        ds = classes.run(a.dataset, a.kmax, a.out, a.csv, _settings(a.settings), _progress)
    log.info("wrote %s and %s: %d clusters", a.out, a.csv, ds.sizes["cluster_id"])


def _cmd_cluster(a: argparse.Namespace) -> None:
    # lazy: snakemake, for the cluster command only
    from ia_stages.pipeline import cluster_command as user_run
    from ia_stages.pipeline.run_display import one_line_warnings

    with one_line_warnings("ia-stages cluster"):
        cfg = user_run.images_config(
            a.path,
            settings_of_flags(a),
            canvas=a.canvas,
            downsample=a.downsample,
            invert=a.invert,
            labels=a.labels,
            max_images=a.max_images,
            block_size=a.block_size,
            seed=a.seed,
            pixel_size=a.pixel_size,
        )
        result = user_run.run(
            cfg,
            a.out,
            a.cores,
            a.snakefile or user_run.SNAKEFILE,
            a.report,
            unlock=a.unlock,
            force=a.force,
            aligned=a.aligned,
            verbose=a.live_log,
        )
    for line in user_run.summary_lines(result):
        print(line)


def _cmd_export(a: argparse.Namespace) -> None:
    """The class averages as MRC and TIFF stacks with ``particles.star`` beside them, or the
    members aligned onto their class averages as a TIFF stack."""
    from ia_stages.pipeline import exports  # lazy: the export command's writers

    pixel_size = _settings(a.settings).get("pixel_size")
    out = Path(a.out)
    if a.what == "classes":
        written = exports.write_classes(a.dataset, a.classes, out.parent, pixel_size)
        if exports.star_available():
            star = out.parent / "particles.star"
            written.append(exports.write_star(a.dataset, a.classes, star, pixel_size))
    elif a.what == "star":
        written = [exports.write_star(a.dataset, a.classes, out, pixel_size)]
    else:
        written = [exports.write_aligned(a.dataset, a.classes, out)]
    log.info("wrote %s", ", ".join(str(p) for p in written))


def _cmd_settings(a: argparse.Namespace) -> None:
    """Print a preset's whole settings tree (with the flags' and a file's values) as YAML."""
    tree = Settings.from_dict(settings_of_flags(a))
    print(yaml.safe_dump(tree.to_dict(), sort_keys=False), end="")


def _cmd_theory(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import theory

    with _use_threads(a.threads):
        df = theory.run(a.dataset, a.features, a.kmax, a.out, _settings(a.settings))
    log.info("wrote %s: %d rows", a.out, len(df))


def _cmd_bench_table(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import bench_tables

    try:
        if a.table == "clustering":
            bench_tables.clustering(a.inputs, a.datasets, a.out_stem)
        elif a.table == "theory":
            bench_tables.theory(a.inputs, a.out_stem)
        else:
            bench_tables.cost(a.inputs, a.out_stem)
    except ValueError as err:
        raise InputError(str(err)) from None
    log.info("wrote %s.{csv,md,tex}", a.out_stem)


def _cmd_figure(a: argparse.Namespace) -> None:
    from ia_stages.pipeline.stages import figures

    n = figures.OUTPUTS.get(a.name, 1)
    if len(a.out) != n:
        raise InputError(
            f"figure {a.name} writes {n} file(s): --out takes {n} path(s), got {len(a.out)}"
        )
    figures.FIGURES[a.name](a.inputs, a.out[0] if n == 1 else a.out)
    log.info("wrote %s", " ".join(a.out))


def _cmd_check_config(a: argparse.Namespace) -> None:
    # lazy: jsonschema: a job gets its settings as JSON, unvalidated
    from ia_stages.pipeline.config import load_config

    load_config(a.config, a.schema or SCHEMA)
    print(f"{a.config}: valid")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, as the stages' own errors are:
    ``<prog>: error: <message> (see <prog> --help)``, exit status 2 (argparse's usage block
    before the line buried it: fifteen lines for ``ia-stages cluster``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


DESCRIPTION = """\
Invariant Attention: cluster images whatever their rotations and translations.

  ia-stages cluster my_images/ --out my_run          cluster a folder of images
  ia-stages cluster stack.mrcs --out run --sigma 2   settings by flag (ia-stages cluster -h)
  ia-stages settings --preset paper                  print a preset's settings (the YAML keys)
  ia-stages check-config config/config.yaml          validate a workflow config

The workflow runs the commands of 'ia-stages stage' (one per pipeline stage) as its jobs."""


def _arg(*names: str, **kwargs: object) -> tuple:
    return names, kwargs


THREADS = _arg("--threads", type=int, help="CPU threads (default: all cores)")
SETTINGS = _arg("--settings", required=True, help="the job's settings (JSON)")
OUT = _arg("--out", required=True, help="the store it writes")
IMAGES = _arg("--images", required=True, help="the iteration's images (a features store)")
ROWS = _arg("--rows", type=int, required=True, help="rows per block")
PREVIOUS = _arg(
    "--previous", help="the previous iteration's kNN store: its lists are the candidates"
)
FEATURES = _arg("--features", required=True, help="the features store")

# the stage commands the workflow's rules run: name -> (function, help, its own arguments);
# every stage but the last four also takes --settings and --out
STAGES: dict[str, tuple[Callable, str, list[tuple]]] = {
    "dataset": (_cmd_dataset, "generate a dataset store", []),
    "kmax-block": (_cmd_kmax_block, "kappa^max of one block of pairs", [
        FEATURES,
        _arg("--block", type=int, nargs=2, required=True, metavar=("BI", "BJ")),
        _arg("--block-size", type=int, required=True), THREADS,
    ]),
    "kmax-gather": (_cmd_kmax_gather, "assemble kappa^max blocks", [
        _arg("--blocks", nargs="+", required=True),
    ]),
    "kmax-whole": (_cmd_kmax_whole, "kappa^max of every pair in one job", [FEATURES, THREADS]),
    "knn-features": (_cmd_knn_features, "kNN path: invariant features, candidates, sample", [
        IMAGES, PREVIOUS, THREADS,
    ]),
    "knn-whole": (_cmd_knn_whole, "kNN path: one iteration's kNN store in one job", [
        IMAGES, PREVIOUS, THREADS,
    ]),
    "knn-block": (_cmd_knn_block, "kNN path: one row block's candidates, refined", [
        IMAGES, FEATURES, _arg("--block", type=int, required=True), ROWS, THREADS,
    ]),
    "knn-expand": (_cmd_knn_expand, "kNN path: one row block's second pass", [
        IMAGES,
        _arg("--first", required=True, help="the first round's gathered kNN store"),
        _arg("--blocks", nargs="+", required=True, help="the first round's pair stores"),
        _arg("--block", type=int, required=True), ROWS, THREADS,
    ]),
    "knn-gather": (_cmd_knn_gather, "kNN path: merge row blocks into the kNN store", [
        _arg("--blocks", nargs="+", required=True), FEATURES,
        _arg("--images", help="the iteration's images: the lists are refined over the group"),
        THREADS,
    ]),
    "means": (_cmd_means, "invariant means of one block of columns", [
        FEATURES, _arg("--kmax", required=True),
        _arg("--block", type=int, default=0, help="column block (default 0)"),
        _arg("--block-size", type=int, help="columns per block (default: all)"), THREADS,
    ]),
    "means-gather": (_cmd_means_gather, "assemble invariant-mean blocks", [
        _arg("--blocks", nargs="+", required=True), _arg("--kmax", required=True),
    ]),
    "means-whole": (_cmd_means_whole, "invariant means of every column in one job", [
        FEATURES, _arg("--kmax", required=True), THREADS,
    ]),
    "ka": (_cmd_ka, "kernel-attention iterations", [_arg("--dataset", required=True)]),
    "mean-trace": (_cmd_mean_trace, "Algorithm 1 on a whole dataset (Figure 5)", [
        _arg("--dataset", required=True),
    ]),
    "metrics": (_cmd_metrics, "metrics of one dataset", [
        _arg("--dataset", required=True), _arg("--ka"),
        _arg("--ia-features", nargs="*", default=[]), _arg("--ia-kmax", nargs="*", default=[]),
        _arg("--classes", help="the classes store: IA's read-outs without K (else made here)"),
        THREADS,
    ]),
    "classes": (_cmd_classes, "clusters, class averages and poses of one dataset", [
        _arg("--dataset", required=True),
        _arg("--kmax", required=True, nargs="+", help="kappa^max of every iteration, input first"),
        _arg("--csv", required=True, help="clusters.csv"), THREADS,
    ]),
    "theory": (_cmd_theory, "Table 2 rows of one dataset", [
        _arg("--dataset", required=True),
        _arg("--features", nargs="*", default=[], help="IA features, iterations 1..T"),
        _arg("--kmax", nargs="+", required=True, help="kappa^max, iterations 0..T"), THREADS,
    ]),
    "run-method": (_cmd_run_method, "benchmark methods on one dataset, one store per job", [
        _arg("--dataset", required=True),
        _arg("--kmax", nargs="*", default=None, help="kappa^max stores it reads, in order"),
        _arg("--upstream", nargs="*", default=[], help="stores whose time it builds on"),
        THREADS,
        _arg("--settings", nargs="+", required=True, help="JSON settings, one per job"),
        _arg("--out", nargs="+", required=True, help="output stores, one per job"),
    ]),
    "tables": (_cmd_tables, "summary table over datasets", [
        _arg("--metrics", nargs="+", required=True), _arg("--csv", required=True),
        _arg("--md", required=True),
    ]),
    "bench-table": (_cmd_bench_table, "Tables 1-3 of the clustering benchmark", [
        _arg("table", choices=["clustering", "theory", "cost"]),
        _arg("--inputs", nargs="+", required=True),
        _arg("--datasets", nargs="*", default=[], help="dataset stores (clustering)"),
        _arg("--out-stem", required=True, help="writes STEM.csv, STEM.md, STEM.tex"),
    ]),
    "export": (_cmd_export, "exports a cryo-EM or microscopy tool opens (MRC, TIFF, STAR)", [
        _arg("what", choices=["classes", "star", "aligned"]),
        _arg("--dataset", required=True), _arg("--classes", required=True),
    ]),
    "figure": (_cmd_figure, "draw one figure (clusters: the gallery and the stability)", [
        _arg("name", choices=["fig2", "fig3", "fig4", "fig5", "benchmark", "classes",
                              "stability", "clusters"]),
        _arg("--inputs", nargs="+", required=True), _arg("--out", nargs="+", required=True),
    ]),
}  # fmt: skip
OWN_OUTPUTS = ("run-method", "tables", "bench-table", "figure")  # no --settings/--out of theirs


CLUSTER_USAGE = """ia-stages cluster PATH --out OUT [options]
  ia-stages cluster my_images/ --out my_run
  ia-stages cluster particles.mrcs --out run --n-clusters 10 --pixel-size 1.06 --aligned
  ia-stages cluster cells/ --out run --invert --canvas 64 --sigma auto --report"""

CLUSTER_DESCRIPTION = """\
Cluster a folder or stack of images, whatever their rotation and position: the whole
pipeline, in OUT. It shows one line per stage and ends with the clusters found and where
the results are: clusters.csv (each image's cluster, pose and distance), classes.png (the
gallery), stability.png, summary.csv, the class averages as classes.mrcs and classes.tif,
and particles.star (RELION) with the stack it points into. OUT's results change only when a
run succeeds."""


def _add_cluster(sub: argparse._SubParsersAction) -> None:
    """``ia-stages cluster``: the input's options, the settings (generated from the settings
    tree), the output's and the compute's."""
    sp = sub.add_parser(
        "cluster",
        help="cluster a folder or stack of images (the whole pipeline)",
        usage=CLUSTER_USAGE,
        description=CLUSTER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sp.set_defaults(func=_cmd_cluster)
    sp.add_argument(
        "path",
        help="a folder of PNG/TIFF/JPEG images (subfolders: their labels), or one stack: "
        ".npy/.npz, .zarr/.nc, a multi-page .tif, .mrc/.mrcs",
    )
    inp = sp.add_argument_group("input")
    inp.add_argument("--canvas", type=int, metavar="PX",
                     help="pad or centre-crop every image to PX x PX (default: images of "
                     "different sizes are an error)")  # fmt: skip
    inp.add_argument("--downsample", type=int, default=1, metavar="K",
                     help="average K x K pixel blocks first (default: 1, none)")  # fmt: skip
    inp.add_argument("--invert", action="store_true",
                     help="dark objects on a light background (default: light on "
                     "dark)")  # fmt: skip
    inp.add_argument("--labels", metavar="CSV",
                     help="a CSV of file,label (file name or stack index -> class) for the "
                     "scores in summary.csv (default: the subfolders' names, if any)")  # fmt: skip
    inp.add_argument("--max-images", type=int, metavar="N",
                     help="cluster a random subset of N images (default: all)")  # fmt: skip
    add_settings_flags(sp.add_argument_group("clustering"))
    out = sp.add_argument_group("output")
    out.add_argument("--out", required=True,
                     help="the output folder (required; not inside the input folder)")  # fmt: skip
    out.add_argument("--report", action="store_true",
                     help="also write OUT/report.html (default: no)")  # fmt: skip
    out.add_argument("--aligned", action="store_true",
                     help="also write aligned.tif: every image moved onto its class average "
                     "(default: no)")  # fmt: skip
    out.add_argument("--pixel-size", type=float, metavar="A",
                     help="pixel size in angstrom for the MRC and STAR files (default: an MRC "
                     "input's header, else none)")  # fmt: skip
    out.add_argument("--force", action="store_true",
                     help="replace the results of another input that OUT holds (default: "
                     "refused)")  # fmt: skip
    out.add_argument("--verbose", dest="live_log", action="store_true",
                     help="show the workflow's whole log instead of one line per stage "
                     "(default: no; the log is always in OUT/logs/)")  # fmt: skip
    out.add_argument("--unlock", action="store_true",
                     help="remove the lock a killed run left in OUT and resume where it "
                     "stopped (default: a locked OUT is refused)")  # fmt: skip
    comp = sp.add_argument_group("compute")
    comp.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)),
                      help="CPU cores for the workflow (default: all this process may "
                      "use)")  # fmt: skip
    comp.add_argument("--block-size", type=int, default=256, metavar="N",
                      help="images per kappa^max job (default: 256)")  # fmt: skip
    comp.add_argument("--seed", type=int, default=0,
                      help="the run's random seed: the same seed gives the same clusters "
                      "(default: 0)")  # fmt: skip
    comp.add_argument("--snakefile",
                      help="another workflow's Snakefile (default: the one inside the "
                      "installed package)")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: the commands users run, and ``stage`` with one command per
    pipeline stage."""
    p = OneLineParser(
        prog="ia-stages", description=DESCRIPTION,
        epilog="Run 'ia-stages COMMAND --help' for the options of one command. An error in the "
        "input (config, stores, images, settings) prints one line and exits with status 2.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--version", action="version", version=f"ia-stages {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    _add_cluster(sub)
    sp = sub.add_parser("settings", help="print a preset's settings tree as YAML")
    sp.set_defaults(func=_cmd_settings)
    add_settings_flags(sp)
    sp = sub.add_parser("check-config", help="validate a workflow config file")
    sp.set_defaults(func=_cmd_check_config)
    sp.add_argument("config")
    sp.add_argument("--schema", default=None)
    stage = sub.add_parser("stage", help="run one pipeline stage (the workflow's jobs)")
    stages = stage.add_subparsers(dest="stage", required=True, metavar="STAGE")
    for name, (func, what, args) in STAGES.items():
        sp = stages.add_parser(name, help=what)
        sp.set_defaults(func=func)
        for names, kwargs in args:
            sp.add_argument(*names, **kwargs)
        if name not in OWN_OUTPUTS:
            for names, kwargs in (SETTINGS, OUT):
                sp.add_argument(*names, **kwargs)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ia-stages`` console script."""
    args = build_parser().parse_args(argv)
    global _JOB_OUT
    out = getattr(args, "out", None)
    _JOB_OUT = (out[0] if isinstance(out, list) else out) if args.command == "stage" else None
    # the package's own logger only: Snakemake (run by `ia-stages cluster`) prints its lines
    # itself, and a root handler would print every one of them a second time
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        args.func(args)
    except Exception as err:
        if not isinstance(err, expected_errors()):
            raise
        command = args.command if args.command != "stage" else f"stage {args.stage}"
        print(f"ia-stages {command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
