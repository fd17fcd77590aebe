"""``ia-stages cluster PATH --out DIR``: the pipeline on one folder or stack of the user's images.

Writes a config for one ``images`` dataset into ``DIR/config.yaml`` (the default config is
never touched), runs the same Snakemake workflow through its API with ``DIR`` as working
directory (so ``DIR/results/`` holds every store and log, and a rerun does only what changed),
and copies ``clusters.csv`` and the gallery to the top of ``DIR``.

Every input is read and checked before anything in ``DIR`` is written (config, images: pixels
included), so a bad input leaves an earlier run's output as it was. A run killed with
``kill -9`` leaves Snakemake's lock behind; the next run names it, and ``resume=True``
(``--resume``) removes it and carries on where the killed run stopped.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import yaml

from ia_stages.pipeline.config import SNAKEFILE, ConfigError, validate_config

DATASET = "images"


def images_config(
    path: str | Path,
    canvas: int | None = None,
    downsample: int = 1,
    invert: bool = False,
    labels: str | Path | None = None,
    max_images: int | None = None,
    beta: float | None = None,
    kernel_sigma: float | None = None,
    threshold: float | None = None,
    iterations: int = 2,
    mean_steps: int = 20,
    mean_images: int | None = 24,
    block_size: int = 256,
    seed: int = 0,
    backend: str = "auto",
    background: str = "none",
) -> dict:
    """The workflow config for one ``images`` dataset: IA only, no paper figures or benchmark.

    Paths are made absolute, since the workflow runs in the output folder. ``mean_steps`` and
    ``mean_images`` are ``ia.mean.steps`` and ``ia.mean.max_images`` (the cost of a mean is
    linear in both; 24 as in the default config).
    """
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
    for key, value in (("beta", beta), ("kernel_sigma", kernel_sigma)):
        if value is not None:
            ds[key] = value
    if threshold is not None:
        ds["readout_threshold"] = threshold
    return {
        "seed": seed,
        "backend": backend,
        "block_size": block_size,
        "datasets": {DATASET: ds},
        "ia": {
            "datasets": [DATASET],
            "iterations": iterations,
            "mean": {"steps": mean_steps, "max_images": mean_images},
        },
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


PID_FILE = ".ia-stages.pid"  # the process id of the run using the folder


def run(
    config: dict,
    out: str | Path,
    cores: int = 2,
    snakefile: str | Path = SNAKEFILE,
    report: bool = False,
    resume: bool = False,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Path]:
    """Check every input, write ``config`` to ``out/config.yaml``, run the workflow in ``out``.

    Parameters
    ----------
    config : the workflow config (:func:`images_config`)
    out : the output folder (created; an existing folder is reused: only what changed reruns)
    cores : CPU cores for the workflow, default 2
    snakefile : the workflow's Snakefile, default the package's
    report : also write ``out/report.html``
    resume : remove the lock a killed run left in ``out`` and carry on (jobs it left
        incomplete are rerun)
    warn : called with every warning about the input (grayscale conversion, padding,
        cropping, background); default: printed on stderr

    Returns
    -------
    dict name -> path of what it wrote at the top of ``out``: clusters.csv, classes.png,
    stability.png, summary.csv and (``report``) report.html.

    Raises
    ------
    ConfigError, InputError
        one line, before anything in ``out`` is written, for a bad config, bad images (NaN or
        inf, all-zero or constant images, images too small: naming the file and image), an
        ``out`` that is a file or cannot be written, or a lock; a failed job's own error line.

    Example
    -------
    >>> run(images_config("digits/"), "out/")  # doctest: +SKIP
    {'clusters.csv': PosixPath('/.../out/clusters.csv'), ...}
    """
    from ia_stages.pipeline.stages.common import InputError

    snakefile = Path(snakefile)
    if not snakefile.is_file():
        raise InputError(f"{snakefile}: Snakefile not found (give --snakefile)")
    out = _check_out(Path(out).resolve())
    validate_config(config)  # one-line ConfigError before anything is written
    for message in check_inputs(config):
        (warn or _warn)(message)
    _check_lock(out, resume)
    try:
        out.mkdir(parents=True, exist_ok=True)
        cfg_path = out / "config.yaml"
        text = yaml.safe_dump(config, sort_keys=False)
        if not cfg_path.is_file() or cfg_path.read_text() != text:
            cfg_path.write_text(text)
    except OSError as err:
        raise InputError(f"--out {out}: cannot write there ({err.strerror})") from None
    with _pid_file(out):
        run_snakemake(snakefile, out, cfg_path, targets(), cores, report, unlock=resume)
    copies = {
        "clusters.csv": out / targets()[0],
        "classes.png": out / targets()[1],
        "stability.png": out / targets()[2],
        "summary.csv": out / targets()[3],
    }
    written = {}
    for name, src in copies.items():
        tmp = out / f".{name}.tmp"
        shutil.copyfile(src, tmp)
        os.replace(tmp, out / name)
        written[name] = out / name
    if report:
        written["report.html"] = out / "report.html"
    return written


def check_inputs(config: dict) -> list[str]:
    """Read every ``images`` dataset of ``config`` (pixels included) and check it, as the
    dataset stage will; returns the warnings the reading gave.

    Raises :class:`InputError` with the loader's one line (file and image named).
    """
    from ia_stages.data.datasets import DatasetError
    from ia_stages.data.user_images import load_images
    from ia_stages.pipeline.stages.common import InputError

    messages: list[str] = []
    for name, ds in config["datasets"].items():
        if ds["kind"] != "images":
            continue
        options = {k: ds[k] for k in ("path", "canvas", "downsample", "invert", "labels")}
        options["background"] = ds.get("background", "none")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                load_images(**options)  # every image, whatever subset max_images draws
            except DatasetError as err:
                raise InputError(f"datasets.{name}: {err}") from None
        messages += [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return messages


def _warn(message: str) -> None:
    print(f"ia-stages cluster: warning: {message}", file=sys.stderr)


def _check_out(out: Path) -> Path:
    """``out`` if it is (or can become) a writable folder, else a one-line InputError."""
    from ia_stages.pipeline.stages.common import InputError

    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: is a file, not a folder; give a folder")
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise InputError(f"--out {out}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: cannot write in {existing} (permission denied)")
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _check_lock(out: Path, resume: bool) -> None:
    """One line when Snakemake's lock in ``out`` is held by a running or a killed run."""
    from ia_stages.pipeline.stages.common import InputError

    locks = out / ".snakemake" / "locks"
    if not (locks.is_dir() and any(locks.iterdir())):
        return
    try:
        pid = int((out / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        pid = None
    if pid is not None and pid != os.getpid() and _pid_alive(pid):
        raise InputError(
            f"{out}: another ia-stages run (process {pid}) is using this folder; wait for it "
            "to finish or give another --out"
        )
    if not resume:
        raise InputError(
            f"{out}: locked by a run that was killed (or another Snakemake run); if none is "
            f"running, rerun with --resume to unlock {out} and carry on"
        )


@contextmanager
def _pid_file(out: Path):
    path = out / PID_FILE
    path.write_text(str(os.getpid()))
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


@contextmanager
def _snakemake_logging_once():
    """Snakemake's log records reach the console through its own handler only (not also
    through the root logger the ``ia-stages`` command configures, which printed them twice)."""
    logger = logging.getLogger("snakemake")
    before = logger.propagate
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = before


def run_snakemake(
    snakefile: str | Path,
    workdir: str | Path,
    configfile: str | Path,
    goals: list[str],
    cores: int = 2,
    report: bool = False,
    unlock: bool = False,
) -> None:
    """Run the workflow up to ``goals`` in ``workdir`` through Snakemake's API: the one runner
    of ``ia-stages cluster`` and the workflow tests.

    ``unlock`` removes a lock a killed run left and reruns the jobs it left incomplete.
    A failure raises :class:`InputError` with the failed job's own error line (from its log)
    when it has one, else Snakemake's first line; the full folder is named, never cut.
    """
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

    workdir = Path(workdir).resolve()

    def workflow(api):
        return api.workflow(
            resource_settings=ResourceSettings(cores=cores),
            config_settings=ConfigSettings(configfiles=[Path(configfile)]),
            storage_settings=StorageSettings(),
            snakefile=Path(snakefile),
            workdir=workdir,
        )

    quiet = OutputSettings(quiet={"progress", "rules", "host"})
    started = time.time()
    try:
        with _snakemake_logging_once():
            if unlock:
                with SnakemakeApi(quiet) as api:
                    workflow(api).dag(DAGSettings(targets=goals)).unlock()
            with SnakemakeApi(quiet) as api:
                dag = workflow(api).dag(DAGSettings(targets=goals, force_incomplete=unlock))
                dag.execute_workflow(executor="local", execution_settings=ExecutionSettings())
            if report:
                with SnakemakeApi(quiet) as api:
                    workflow(api).dag(DAGSettings(targets=goals)).create_report(
                        reporter="html",
                        report_settings=ReportSettings(path=workdir / "report.html"),
                    )
    except (ConfigError, InputError):
        raise
    except Exception as err:  # Snakemake reports a failed job as one of many exception kinds
        text = " ".join(str(err).split())
        if "cannot be locked" in text:
            raise InputError(
                f"{workdir}: locked by another run or by a run that was killed; if none is "
                f"running, rerun with --resume to unlock {workdir} and carry on"
            ) from None
        reason = _job_error(workdir / "results" / "logs", started)
        if reason:
            raise InputError(f"a job failed: {reason}") from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputError(
            f"the workflow stopped ({first}); see the logs in {workdir / 'results' / 'logs'}"
        ) from None


def _job_error(logs: Path, since: float) -> str | None:
    """The first ``ia-stages ...: error: ...`` line of a job log written after ``since``,
    with the log's path; None when there is none."""
    if not logs.is_dir():
        return None
    recent = sorted(
        (p for p in logs.rglob("*.log") if p.stat().st_mtime >= since - 1),
        key=lambda p: p.stat().st_mtime,
    )
    for log in recent:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ia-stages ") and ": error: " in line:
                return f"{line} (log: {log})"
    return None
