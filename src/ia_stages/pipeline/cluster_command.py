"""``ia-stages cluster PATH --out DIR``: the pipeline on one folder or stack of the user's images.

Writes a config for one ``images`` dataset into ``DIR/config.yaml`` (the default config is
never touched), runs the same Snakemake workflow through its API with ``DIR`` as working
directory (so ``DIR/results/`` holds every store and log, and a rerun does only what changed),
and copies ``clusters.csv`` and the gallery to the top of ``DIR``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import yaml

from ia_stages.ia.settings import DENSE_MAX
from ia_stages.pipeline.config import SNAKEFILE, ConfigError, validate_config
from ia_stages.pipeline.devices import gpu_count

DATASET = "images"
KMAX_MODES = ("auto", "dense", "candidates")


def images_config(
    path: str | Path,
    canvas: int | None = None,
    downsample: int = 1,
    invert: bool = False,
    labels: str | Path | None = None,
    max_images: int | None = None,
    beta: float | None = None,
    kernel_sigma: float | str | None = None,
    threshold: float | None = None,
    iterations: int | None = None,
    mean_steps: int = 20,
    mean_images: int | None = 24,
    block_size: int = 256,
    seed: int = 0,
    backend: str = "auto",
    background: str = "none",
    mask_threshold: float | None = None,
    preset: str | None = None,
    group: str = "se2",
    mirror: bool = False,
    kmax: str = "auto",
    dense_max: int | None = None,
    n_candidates: int | None = None,
) -> dict:
    """The workflow config for one ``images`` dataset: IA only, no paper figures or benchmark.

    Paths are made absolute, since the workflow runs in the output folder. ``mean_steps`` and
    ``mean_images`` are ``ia.mean.steps`` and ``ia.mean.max_images`` (the cost of a mean is
    linear in both; 24 as in the default config). ``preset`` (None: 'images') is the
    :data:`ia_stages.ia.settings.PRESETS` entry the attention, read-out, stopping rule, kernel
    and iterations come from, as in the estimator; a value given here wins.

    ``kmax`` is how kappa^max is computed: 'dense' (every pair, n x n stores), 'candidates'
    (the kNN path: invariant-feature candidates refined exactly, no n x n store; needs the kNN
    attention) or 'auto': candidates when there are more than ``dense_max`` images (None:
    :data:`ia_stages.ia.settings.DENSE_MAX`), decided from the files' headers by the
    workflow's config (``kmax: {mode: auto, dense_max: N}``).
    ``n_candidates`` is c, the candidates per image (None: sized to n,
    :meth:`ia_stages.kmax.features.FeatureSettings.sized`).
    """
    from dataclasses import asdict

    from ia_stages.ia.settings import ia_settings

    ia = ia_settings(preset)
    ds: dict = {
        "kind": "images",
        "path": str(Path(path).resolve()),
        "canvas": canvas,
        "downsample": downsample,
        "invert": invert,
        "labels": str(Path(labels).resolve()) if labels else None,
        "max_images": max_images,
        "background": background,
    }
    if mask_threshold is not None:
        if background != "mask":
            raise ConfigError("--mask-threshold: applies to --background mask only")
        ds["mask"] = {"threshold": mask_threshold}
    ds["beta"] = ia.beta if beta is None else beta
    ds["kernel_sigma"] = ia.sigma if kernel_sigma is None else kernel_sigma
    if ds["kernel_sigma"] == "auto":  # run() chooses it from the pixels
        ds["noise"] = asdict(ia.noise)
    ds["normalization"] = ia.normalization
    ds["attention"] = asdict(ia.attention)
    ds["readout_threshold"] = ia.readout.threshold if threshold is None else threshold
    readout = {
        "ia": "graph" if ia.readout.kind == "graph" else "average",
        "linkage": ia.readout.linkage,
        "graph": {
            "k_ia": ia.readout.k,
            "with_k": ia.readout.with_k,
            "restarts": ia.readout.restarts,
            "restart_bracket": ia.readout.restart_bracket,
            "restart_tries": ia.readout.restart_tries,
            "with_k_engine": ia.readout.with_k_engine,
            "community": ia.readout.community,
            "resolution": ia.readout.resolution,
            "resolutions": list(ia.readout.resolutions),
            "min_cluster_size": ia.readout.min_cluster_size,
            "merge": ia.readout.merge,
        },
    }
    if group != "se2" or mirror:
        ds["group"] = {"name": group, "mirror": mirror}
    if kmax not in KMAX_MODES:
        raise ConfigError(f"--kmax: must be one of {', '.join(KMAX_MODES)}, got {kmax!r}")
    if kmax != "dense":
        ds["kmax"] = {"mode": kmax}
        if kmax == "auto":
            ds["kmax"]["dense_max"] = DENSE_MAX if dense_max is None else dense_max
        if n_candidates is not None:
            ds["kmax"]["features"] = {"n_candidates": n_candidates}
    return {
        "seed": seed,
        "backend": backend,
        "block_size": block_size,
        "datasets": {DATASET: ds},
        "ia": {
            "datasets": [DATASET],
            "iterations": ia.iterations if iterations is None else iterations,
            "init": ia.init,
            "stop": asdict(ia.stop),
            "mean": {"steps": mean_steps, "max_images": mean_images},
        },
        "readout": readout,
        "ka": {"datasets": []},
        "benchmark": {"datasets": []},
        "figures": {"blobs": None, "shapes": None, "mean_trace": {"dataset": None}},
    }


def targets(dataset: str = DATASET) -> list[str]:
    """What the one command asks the workflow for."""
    return [
        f"results/{dataset}/clusters.csv",
        f"results/figures/{dataset}_classes.png",
        f"results/figures/{dataset}_stability.png",
        "results/tables/summary.csv",
    ]


def run(
    config: dict,
    out: str | Path,
    cores: int = 2,
    snakefile: str | Path = SNAKEFILE,
    report: bool = False,
    unlock: bool = False,
) -> dict[str, Path]:
    """Check everything, write ``out/config.yaml``, run the workflow in ``out``.

    Every check runs before anything in ``out`` is written: the config, the output folder
    (not a file, writable), every image (read once here: NaN/inf, constant images, sizes;
    warnings such as grayscale conversion are shown here, on the console), and a lock left by
    a killed run (``unlock=True`` removes it and the run resumes where it stopped).

    Returns the paths of what it wrote at the top of ``out``: clusters.csv, classes.png,
    stability.png, summary.csv and (``report``) report.html.

    Raises
    ------
    ConfigError, DatasetError, InputError, BackendError
        one line naming the key, file or folder (or the missing GPU); nothing in ``out`` has
        changed.
    """
    from ia_stages.pipeline.stages.common import InputError

    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InputError(f"--cores must be an integer >= 1, got {cores!r}")
    snakefile = Path(snakefile)
    if not snakefile.is_file():
        raise InputError(f"{snakefile}: Snakefile not found (give --snakefile)")
    auto_sigma = _auto_sigma(config)
    checked = validate_config(config)  # one-line ConfigError before anything is written
    out = Path(out).resolve()
    check_out(out)
    check_images(checked, auto_sigma)
    for name in auto_sigma:
        config["datasets"][name]["kernel_sigma"] = checked["datasets"][name]["kernel_sigma"]
    check_lock(out, unlock)
    gpus = gpu_count(checked["backend"])  # BackendError for cupy without a GPU, before writing
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    marker = out / RUN_MARKER
    marker.write_text(f"{os.getpid()}\n")
    try:
        snakemake(
            snakefile,
            out,
            cfg_path,
            targets(),
            cores,
            report,
            rerun_incomplete=unlock,
            gpus=gpus,
        )
    finally:
        marker.unlink(missing_ok=True)
    copies = {
        "clusters.csv": out / targets()[0],
        "classes.png": out / targets()[1],
        "stability.png": out / targets()[2],
        "summary.csv": out / targets()[3],
    }
    written = {}
    for name, src in copies.items():
        shutil.copyfile(src, out / name)
        written[name] = out / name
    if report:
        written["report.html"] = out / "report.html"
    return written


def _auto_sigma(config: dict) -> dict:
    """The ``images`` data sets whose ``kernel_sigma`` is 'auto': their noise settings (taken
    out of ``config``, ``kernel_sigma`` set to their ``min_sigma`` until the pixels are read)."""
    from ia_stages.core.noise import NoiseSettings

    auto = {}
    for name, ds in config["datasets"].items():
        if ds.get("kernel_sigma") == "auto":
            auto[name] = NoiseSettings(**ds.pop("noise", {}))
            ds["kernel_sigma"] = auto[name].min_sigma
    return auto


RUN_MARKER = ".ia-stages-run"
"""File in ``--out`` holding the process id of the run working there (removed at its end)."""


def check_out(out: Path) -> None:
    """One-line InputError unless ``out`` is (or can become) a folder this process can write."""
    from ia_stages.pipeline.stages.common import InputError

    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is an existing file, not a folder")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"--out {out}: {parent} is a file, not a folder")
    try:
        probe = tempfile.NamedTemporaryFile(dir=parent, prefix=".ia-stages-probe-")
        probe.close()
    except OSError as err:
        raise InputError(f"--out {out}: cannot write in {parent} ({err.strerror})") from None


def check_images(config: dict, auto_sigma: dict | None = None) -> None:
    """Read every image of the config's ``images`` data sets once, before any job: a bad one
    stops the run with one DatasetError line naming the file and its index. Warnings (RGB
    converted to grayscale, images padded or cropped) reach the console from here.

    ``auto_sigma`` maps a data set's name to the :class:`~ia_stages.core.noise.NoiseSettings`
    that choose its ``kernel_sigma`` from these pixels (``sigma='auto'``); the number is
    written into ``config``, so the run's config file and hashes hold it."""
    from ia_stages.core.validation import min_side
    from ia_stages.data.datasets import DatasetError
    from ia_stages.data.user_images import load_images

    auto_sigma = auto_sigma or {}
    for name, ds in config["datasets"].items():
        if ds["kind"] != "images":
            continue
        noise = auto_sigma.get(name)
        images = load_images(
            ds["path"],
            canvas=ds["canvas"],
            downsample=ds["downsample"],
            invert=ds["invert"],
            labels=ds["labels"],
            background=ds["background"],
            mask=ds.get("mask"),
            sigma=noise.min_sigma if noise else ds["kernel_sigma"],
        )
        if noise:
            sigma = round(noise.sigma(images.data), 3)
            if min(images.data.shape[1:]) < min_side(sigma):
                raise DatasetError(
                    f"{ds['path']}: the images' noise calls for kernel_sigma {sigma:g}, too "
                    f"much for images of {images.data.shape[1]} x {images.data.shape[2]} px; "
                    "give --kernel-sigma"
                )
            ds["kernel_sigma"] = sigma


def check_lock(out: Path, unlock: bool) -> None:
    """One-line InputError when a run holds ``out`` or a killed one left its lock; with
    ``unlock`` a killed run's lock is removed (Snakemake's unlock) and the run resumes."""
    from ia_stages.pipeline.stages.common import InputError

    locks = out / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()):
        return
    pid = _marker_pid(out / RUN_MARKER)
    if pid is not None and _alive(pid):
        raise InputError(
            f"{out}: another run (process {pid}) is working in this folder; wait for it to end"
        )
    if not unlock:
        raise InputError(
            f"{out}: locked by an earlier run that was killed; run the same command with "
            "--unlock to remove the lock and resume where it stopped"
        )
    for lock in locks.iterdir():
        lock.unlink()


def _marker_pid(marker: Path) -> int | None:
    try:
        return int(marker.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def snakemake(
    snakefile: str | Path,
    workdir: str | Path,
    configfile: str | Path | None,
    goals: list[str],
    cores: int,
    report: bool = False,
    rerun_incomplete: bool = False,
    dryrun: bool = False,
    gpus: int = 0,
) -> None:
    """Run the workflow through Snakemake's API: the one runner of the command and the tests.

    ``gpus`` > 0 caps the jobs holding a GPU at once (``--resources gpu=N``), so that each
    finds a free device instead of waiting on another job's lock with a core held.

    Snakemake's own lines go to the console once. When a job fails, the one-line reason its
    stage wrote to its log (``ia-stages <stage>: error: ...``) is raised as the InputError's
    message, with the log's path.
    """
    import immutables
    from snakemake.api import SnakemakeApi
    from snakemake.report.html_reporter import ReportSettings
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    from ia_stages.pipeline.stages.common import InputError

    workdir = Path(workdir)
    configs = [Path(configfile)] if configfile else []

    def workflow(api):
        return api.workflow(
            resource_settings=ResourceSettings(
                cores=cores, resources={"gpu": gpus} if gpus else immutables.Map()
            ),
            config_settings=ConfigSettings(configfiles=configs),
            storage_settings=StorageSettings(),
            snakefile=Path(snakefile),
            workdir=workdir,
        )

    quiet = {"progress", "rules", "host"}
    started = time.time()
    try:
        with SnakemakeApi(OutputSettings(quiet=quiet, dryrun=dryrun)) as api:
            dag = workflow(api).dag(DAGSettings(targets=goals, force_incomplete=rerun_incomplete))
            dag.execute_workflow(
                executor="dryrun" if dryrun else "local", execution_settings=ExecutionSettings()
            )
        if report:
            with SnakemakeApi(OutputSettings(quiet=quiet)) as api:
                workflow(api).dag(DAGSettings(targets=goals)).create_report(
                    reporter="html", report_settings=ReportSettings(path=workdir / "report.html")
                )
    except (ConfigError, InputError):
        raise
    except Exception as err:  # Snakemake reports a failed job as one of many exception kinds
        reason = _job_error(workdir / "results" / "logs", started)
        if reason is None:
            text = str(err).strip()
            reason = text.splitlines()[0] if text else type(err).__name__
            reason += f"; see the logs in {workdir / 'results' / 'logs'}"
        raise InputError(f"the workflow stopped: {reason}") from None


def _job_error(logs: Path, since: float) -> str | None:
    """The first ``ia-stages <stage>: error:`` line of a job log written since ``since``, with
    the log's path; None when no log holds one."""
    if not logs.is_dir():
        return None
    recent = sorted(
        (f for f in logs.rglob("*.log") if f.stat().st_mtime >= since - 1),
        key=lambda f: f.stat().st_mtime,
    )
    for log in recent:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ia-stages ") and ": error: " in line:
                return f"{line.split(': error: ', 1)[1]} (job log {log})"
    return None
