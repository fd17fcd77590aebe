"""Command line: ``ia-stages <stage> ...``, one sub-command per pipeline stage, and
``ia-stages cluster PATH --out DIR``, the whole pipeline on a folder or stack of images.

Errors in the input (config, stores, images) print one line ``ia-stages <stage>: error: ...``
and exit with status 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from ia_stages import __version__
from ia_stages.pipeline.config import SCHEMA, ConfigError
from ia_stages.pipeline.stages.common import InputError
from ia_stages.pipeline.store import store_sizes

log = logging.getLogger("ia_stages")


def expected_errors() -> tuple[type[Exception], ...]:
    """The errors in the input (config, stores, images) that end a command in one line.

    Imported here, not at the top, so that a stage's job loads only the modules it needs."""
    from ia_stages.core.backend import BackendError
    from ia_stages.data.datasets import DatasetError
    from ia_stages.data.loaders import LoaderError
    from ia_stages.pipeline.config import ConfigError
    from ia_stages.pipeline.stages.common import InputError
    from ia_stages.pipeline.store import StoreError

    return (ConfigError, StoreError, InputError, DatasetError, LoaderError, BackendError)


@contextmanager
def _progress(total: int | None, desc: str):
    """A tqdm bar on stderr (plain log lines when stderr is not a terminal)."""
    from tqdm import tqdm

    bar = tqdm(
        total=total,
        desc=desc,
        unit="it",
        file=sys.stderr,
        mininterval=0.5 if sys.stderr.isatty() else 10.0,
        ascii=not sys.stderr.isatty(),
    )
    try:
        yield bar.update
    finally:
        bar.close()


def _sigma(text: str) -> float | str:
    """--kernel-sigma: a number of px or 'auto'."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def _settings(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"--settings is not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise ConfigError("--settings must be a JSON object")
    return value


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
    import numba
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
    from ia_stages.pipeline import cluster_command as user_run

    cfg = user_run.images_config(
        a.path,
        canvas=a.canvas,
        downsample=a.downsample,
        invert=a.invert,
        labels=a.labels,
        max_images=a.max_images,
        beta=a.beta,
        kernel_sigma=a.kernel_sigma,
        threshold=a.threshold,
        iterations=a.iterations,
        mean_steps=a.mean_steps,
        mean_images=a.mean_images,
        block_size=a.block_size,
        preset=a.preset,
        seed=a.seed,
        backend=a.backend,
        background=a.background,
        mask_threshold=a.mask_threshold,
        group=a.group,
        mirror=a.mirror,
        kmax=a.kmax,
        dense_max=a.dense_max,
        n_candidates=a.candidates,
    )
    written = user_run.run(
        cfg, a.out, a.cores, a.snakefile or user_run.SNAKEFILE, a.report, unlock=a.unlock
    )
    for name, path in written.items():
        print(f"{name}: {path}")


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
    from ia_stages.pipeline.config import load_config

    load_config(a.config, a.schema or SCHEMA)
    print(f"{a.config}: valid")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, as the stages' own errors are:
    ``<prog>: error: <message> (see <prog> --help)``, exit status 2 (argparse's usage block
    before the line buried it: fifteen lines for ``ia-stages cluster``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-command per stage."""
    p = OneLineParser(
        prog="ia-stages",
        description="Invariant Attention: cluster images whatever their rotations and shifts. "
        "The command 'cluster PATH --out DIR' clusters a folder or a stack of images; the "
        "other commands are the stages of the Snakemake pipeline, which its rules run one job "
        "at a time.",
        epilog="Run 'ia-stages COMMAND --help' for the options of one command. An error in the "
        "input (config, stores, images) prints one line and exits with status 2.",
    )
    p.add_argument("--version", action="version", version=f"ia-stages {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="stage", required=True, metavar="COMMAND", title="commands")

    def add(name: str, func: Callable, help: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help)
        sp.set_defaults(func=func)
        return sp

    sp = add("dataset", _cmd_dataset, "generate a dataset store")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("kmax-block", _cmd_kmax_block, "kappa^max of one block of pairs")
    sp.add_argument("--features", required=True)
    sp.add_argument("--block", type=int, nargs=2, required=True, metavar=("BI", "BJ"))
    sp.add_argument("--block-size", type=int, required=True)
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("kmax-gather", _cmd_kmax_gather, "assemble kappa^max blocks")
    sp.add_argument("--blocks", nargs="+", required=True)
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("kmax-whole", _cmd_kmax_whole, "kappa^max of every pair in one job, gathered")
    sp.add_argument("--features", required=True)
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    for name, command, what in (
        ("knn-features", _cmd_knn_features, "kNN path: invariant features, sample"),
        ("knn-whole", _cmd_knn_whole, "kNN path: one iteration's kNN store in one job"),
    ):
        sp = add(name, command, what)
        sp.add_argument("--images", required=True)
        sp.add_argument(
            "--previous", help="the previous iteration's kNN store: its lists are the candidates"
        )
        sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
        sp.add_argument("--settings", required=True)
        sp.add_argument("--out", required=True)

    sp = add("knn-block", _cmd_knn_block, "kNN path: one row block's candidates, refined")
    sp.add_argument("--images", required=True)
    sp.add_argument("--features", required=True)
    sp.add_argument("--block", type=int, required=True)
    sp.add_argument("--rows", type=int, required=True, help="rows per block")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("knn-expand", _cmd_knn_expand, "kNN path: one row block's second pass")
    sp.add_argument("--images", required=True)
    sp.add_argument("--first", required=True, help="the first round's gathered kNN store")
    sp.add_argument("--blocks", nargs="+", required=True, help="the first round's pair stores")
    sp.add_argument("--block", type=int, required=True)
    sp.add_argument("--rows", type=int, required=True, help="rows per block")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("knn-gather", _cmd_knn_gather, "kNN path: merge row blocks into the kNN store")
    sp.add_argument("--blocks", nargs="+", required=True)
    sp.add_argument("--features", required=True)
    sp.add_argument(
        "--images", help="the iteration's images: the final lists are refined over the group"
    )
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("means", _cmd_means, "invariant means of one block of columns")
    sp.add_argument("--features", required=True)
    sp.add_argument("--kmax", required=True)
    sp.add_argument("--block", type=int, default=0, help="column block (default 0)")
    sp.add_argument("--block-size", type=int, help="columns per block (default: all)")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("means-gather", _cmd_means_gather, "assemble invariant-mean blocks")
    sp.add_argument("--blocks", nargs="+", required=True)
    sp.add_argument("--kmax", required=True)
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("means-whole", _cmd_means_whole, "invariant means of every column, gathered")
    sp.add_argument("--features", required=True)
    sp.add_argument("--kmax", required=True)
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("ka", _cmd_ka, "kernel-attention iterations")
    sp.add_argument("--dataset", required=True)
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("mean-trace", _cmd_mean_trace, "Algorithm 1 on a whole dataset (Figure 5)")
    sp.add_argument("--dataset", required=True)
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("metrics", _cmd_metrics, "metrics of one dataset")
    sp.add_argument("--dataset", required=True)
    sp.add_argument("--ka")
    sp.add_argument("--ia-features", nargs="*", default=[])
    sp.add_argument("--ia-kmax", nargs="*", default=[])
    sp.add_argument(
        "--classes", help="the classes store: IA's read-outs without K (else made here)"
    )
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("tables", _cmd_tables, "summary table over datasets")
    sp.add_argument("--metrics", nargs="+", required=True)
    sp.add_argument("--csv", required=True)
    sp.add_argument("--md", required=True)

    sp = add("cluster", _cmd_cluster, "cluster a folder or stack of images (whole pipeline)")
    sp.add_argument(
        "path",
        help="folder of PNG/TIFF/JPEG (subfolders = labels), .npy/.npz, .zarr/.nc, .tif, .mrc(s)",
    )
    sp.add_argument("--out", required=True, help="folder for clusters.csv, the gallery, results/")
    sp.add_argument("--canvas", type=int, help="pad or centre-crop every image to this side (px)")
    sp.add_argument("--downsample", type=int, default=1, help="average k x k pixel blocks")
    sp.add_argument("--invert", action="store_true", help="dark objects on a light background")
    sp.add_argument("--labels", help="CSV file,label (file name or stack index -> class)")
    sp.add_argument("--max-images", type=int, help="a random subset of this many images")
    sp.add_argument("--beta", type=float, help="kappa^max bandwidth on unit-norm images")
    sp.add_argument(
        "--kernel-sigma",
        type=_sigma,
        help="smoothing (px) inside kappa^max (default: the preset's, 1 px), or 'auto': chosen "
        "from the images' noise",
    )
    sp.add_argument(
        "--preset",
        choices=["images", "paper"],
        default="images",
        help="IA's settings as the estimator's preset= (default images: kNN attention, "
        "graph read-out sized to the data; paper: the paper's dense IA)",
    )
    sp.add_argument("--threshold", type=float, help="linkage read-out distance (preset's)")
    sp.add_argument(
        "--iterations",
        type=int,
        help="most IA iterations (default: the preset's: 1 for images, 2 for paper)",
    )
    sp.add_argument(
        "--group", default="se2", choices=["se2", "similarity", "affine"],
        help="transformations factored out (default se2; config: datasets.*.group)",
    )  # fmt: skip
    sp.add_argument("--mirror", action="store_true", help="also match mirror images")
    sp.add_argument(
        "--kmax", default="auto", choices=["auto", "dense", "candidates"],
        help="kappa^max of every pair (dense), or the kNN path: invariant-feature candidates "
        "refined exactly, no n x n array (candidates); auto: candidates above --dense-max images",
    )  # fmt: skip
    sp.add_argument(
        "--dense-max", type=int, help="--kmax auto: most images run dense (default 5000)"
    )
    sp.add_argument(
        "--candidates",
        type=int,
        help="kNN path: candidates per image c (default: sized to n, 48 up to 5,000 images)",
    )
    sp.add_argument("--mean-steps", type=int, default=20, help="Algorithm 1 steps per mean")
    sp.add_argument(
        "--mean-images", type=int, default=24, help="images aligned per invariant mean (cost)"
    )
    sp.add_argument("--block-size", type=int, default=256, help="samples per kappa^max job")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    sp.add_argument(
        "--cores",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="CPU cores for the workflow (default: all this process may use)",
    )
    sp.add_argument("--report", action="store_true", help="also write DIR/report.html")
    sp.add_argument(
        "--unlock",
        action="store_true",
        help="remove the lock a killed run left in DIR and resume where it stopped",
    )
    sp.add_argument(
        "--background",
        choices=["none", "median", "mask"],
        default="none",
        help="'median': subtract each image's border median (grey backgrounds); 'mask' (noisy "
        "images): also set every pixel away from the object to 0",
    )
    sp.add_argument(
        "--mask-threshold",
        type=float,
        default=None,
        help="with --background mask: noise sds a smoothed pixel must exceed to be kept "
        "(default 4)",
    )
    sp.add_argument("--snakefile", help="the workflow's Snakefile (default: the repository's)")

    sp = add("classes", _cmd_classes, "clusters, class averages and poses of one dataset")
    sp.add_argument("--dataset", required=True)
    sp.add_argument(
        "--kmax", required=True, nargs="+", help="kappa^max of every IA iteration, input first"
    )
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--csv", required=True, help="clusters.csv")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")

    sp = add(
        "run-method",
        _cmd_run_method,
        "benchmark methods on one dataset: one store per settings object (method and seed)",
    )
    sp.add_argument("--dataset", required=True)
    sp.add_argument(
        "--kmax",
        nargs="*",
        default=None,
        help="kappa^max stores the method reads (iteration order)",
    )
    sp.add_argument("--upstream", nargs="*", default=[], help="stores whose time it builds on")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", nargs="+", required=True, help="JSON settings, one per job")
    sp.add_argument("--out", nargs="+", required=True, help="output stores, one per job")

    sp = add("theory", _cmd_theory, "Table 2 rows of one dataset")
    sp.add_argument("--dataset", required=True)
    sp.add_argument("--features", nargs="*", default=[], help="IA features, iterations 1..T")
    sp.add_argument("--kmax", nargs="+", required=True, help="kappa^max, iterations 0..T")
    sp.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    sp.add_argument("--settings", required=True)
    sp.add_argument("--out", required=True)

    sp = add("bench-table", _cmd_bench_table, "Tables 1-3 of the clustering benchmark")
    sp.add_argument("table", choices=["clustering", "theory", "cost"])
    sp.add_argument("--inputs", nargs="+", required=True)
    sp.add_argument("--datasets", nargs="*", default=[], help="dataset stores (clustering)")
    sp.add_argument("--out-stem", required=True, help="writes STEM.csv, STEM.md, STEM.tex")

    sp = add("figure", _cmd_figure, "draw one figure (clusters: the gallery and the stability)")
    sp.add_argument(
        "name",
        choices=["fig2", "fig3", "fig4", "fig5", "benchmark", "classes", "stability", "clusters"],
    )
    sp.add_argument("--inputs", nargs="+", required=True)
    sp.add_argument("--out", nargs="+", required=True)

    sp = add("check-config", _cmd_check_config, "validate a config file")
    sp.add_argument("config")
    sp.add_argument("--schema", default=None)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ia-stages`` console script."""
    args = build_parser().parse_args(argv)
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
        print(f"ia-stages {args.stage}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
