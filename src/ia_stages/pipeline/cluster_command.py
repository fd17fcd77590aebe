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

from ia_stages.core.validation import min_side
from ia_stages.data.datasets import DatasetError
from ia_stages.data.user_images import load_images
from ia_stages.ia.prepare import resolve_sigma
from ia_stages.pipeline.config import ConfigError, validate_config
from ia_stages.pipeline.devices import gpu_count
from ia_stages.pipeline.errors import InputError
from ia_stages.pipeline.paths import SNAKEFILE
from ia_stages.settings.tree import Settings

DATASET = "images"


def images_config(
    path: str | Path,
    settings: dict | None = None,
    canvas: int | None = None,
    downsample: int = 1,
    invert: bool = False,
    labels: str | Path | None = None,
    max_images: int | None = None,
    block_size: int = 256,
    seed: int = 0,
) -> dict:
    """The workflow config for one ``images`` dataset: IA only, no paper figures or benchmark.

    ``settings`` are the dataset's settings tree keys (as the estimator's ``config``, with
    ``preset`` among them; the command's flags give them, :mod:`ia_stages.pipeline.flags`);
    the config check builds and checks the tree. Paths are made absolute, since the workflow
    runs in the output folder. The tree's ``backend`` is the workflow's ``backend``.

    Example
    -------
    >>> cfg = images_config("my_images/", {"sigma": 2.0})
    >>> cfg["datasets"]["images"]["settings"]
    {'sigma': 2.0}
    """
    settings = dict(settings or {})
    ds: dict = {
        "kind": "images",
        "path": str(Path(path).resolve()),
        "canvas": canvas,
        "downsample": downsample,
        "invert": invert,
        "labels": str(Path(labels).resolve()) if labels else None,
        "max_images": max_images,
        "settings": settings,
    }
    return {
        "seed": seed,
        "backend": settings.get("backend", "auto"),
        "block_size": block_size,
        "datasets": {DATASET: ds},
        "ia": {"datasets": [DATASET]},
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
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InputError(f"--cores must be an integer >= 1, got {cores!r}")
    snakefile = Path(snakefile)
    if not snakefile.is_file():
        raise InputError(f"{snakefile}: Snakefile not found (give --snakefile)")
    checked = validate_config(config)  # one-line ConfigError before anything is written
    out = Path(out).resolve()
    check_out(out)
    for name, sigma in check_images(checked).items():  # 'auto' resolved on the pixels
        config["datasets"][name].setdefault("settings", {})["sigma"] = sigma
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


RUN_MARKER = ".ia-stages-run"
"""File in ``--out`` holding the process id of the run working there (removed at its end)."""


def check_out(out: Path) -> None:
    """One-line InputError unless ``out`` is (or can become) a folder this process can write."""
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


def check_images(config: dict) -> dict[str, float]:
    """Read every image of the config's ``images`` data sets once, before any job: a bad one
    stops the run with one DatasetError line naming the file and its index. Warnings (RGB
    converted to grayscale, images padded or cropped) reach the console from here.

    Returns the smoothing that ``sigma='auto'`` chooses from these pixels for each data set
    whose tree has it (:func:`ia_stages.ia.prepare.resolve_sigma`), for the run's config file
    and hashes to hold the number."""
    chosen = {}
    for name, ds in config["datasets"].items():
        if ds["kind"] != "images":
            continue
        s = Settings.from_dict(ds["settings"])
        auto = s.sigma == "auto"
        images = load_images(
            ds["path"],
            canvas=ds["canvas"],
            downsample=ds["downsample"],
            invert=ds["invert"],
            labels=ds["labels"],
            background=s.background,
            mask=s.mask,
            sigma=s.noise.min_sigma if auto else s.sigma,
        )
        if auto:
            sigma = round(resolve_sigma(s, images.data).sigma, 3)
            if min(images.data.shape[1:]) < min_side(sigma):
                raise DatasetError(
                    f"{ds['path']}: the images' noise calls for sigma {sigma:g}, too much for "
                    f"images of {images.data.shape[1]} x {images.data.shape[2]} px; give --sigma"
                )
            chosen[name] = sigma
    return chosen


def check_lock(out: Path, unlock: bool) -> None:
    """One-line InputError when a run holds ``out`` or a killed one left its lock; with
    ``unlock`` a killed run's lock is removed (Snakemake's unlock) and the run resumes."""
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
