"""``ia-stages cluster PATH --out OUT``: the pipeline on one folder or stack of the user's images.

Checks everything first (the images, the options, the output folder), then runs the same
Snakemake workflow through its API with ``OUT`` as working directory (``OUT/results/`` holds
every store and job log, and a rerun does only what changed), showing one line per job
(:mod:`ia_stages.pipeline.run_display`) and writing the whole workflow log under ``OUT/logs/``.
Only when the run succeeds are the top-level results (clusters.csv, the gallery, the exports,
config.yaml) swapped in, all together (:mod:`ia_stages.pipeline.out_folder`).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from ia_stages.core.validation import min_side
from ia_stages.data.datasets import DatasetError
from ia_stages.data.user_images import load_images
from ia_stages.ia.prepare import resolve_sigma
from ia_stages.pipeline import out_folder
from ia_stages.pipeline.config import ConfigError, dataset_size, validate_config
from ia_stages.pipeline.devices import gpu_count
from ia_stages.pipeline.errors import InputError
from ia_stages.pipeline.exports import source_pixel_size, star_available
from ia_stages.pipeline.job_progress import PROGRESS_DIR
from ia_stages.pipeline.paths import SNAKEFILE
from ia_stages.pipeline.report_front import FRONT, write_front_page
from ia_stages.pipeline.run_display import RunDisplay, plugin_settings
from ia_stages.pipeline.store import read_store
from ia_stages.settings.spec import clusters_value
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
    pixel_size: float | None = None,
) -> dict:
    """The workflow config for one ``images`` dataset: IA only, no paper figures or benchmark.

    ``settings`` are the dataset's settings tree keys (as the estimator's ``config``, with
    ``preset`` among them; the command's flags give them, :mod:`ia_stages.pipeline.flags`);
    the config check builds and checks the tree. Paths are made absolute, since the workflow
    runs in the output folder. The tree's ``backend`` is the workflow's ``backend``.
    ``pixel_size`` (Å per pixel after ``downsample``; None: an MRC stack's header, else
    unknown) goes into the exports (:mod:`ia_stages.pipeline.exports`).

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
    if pixel_size is None:
        pixel_size = source_pixel_size(path, downsample)
    return {
        "seed": seed,
        "backend": settings.get("backend", "auto"),
        "block_size": block_size,
        "datasets": {DATASET: ds},
        "ia": {"datasets": [DATASET]},
        "ka": {"datasets": []},
        "benchmark": {"datasets": []},
        "figures": {"blobs": None, "shapes": None, "mean_trace": {"dataset": None}},
        "exports": {"pixel_size": pixel_size},
    }


def targets(dataset: str = DATASET, star: bool = True, aligned: bool = False) -> list[str]:
    """What the one command asks the workflow for: the clusters, the figures, the summary
    table and the exports (with particles.star where starfile is installed; ``aligned``:
    aligned.tif)."""
    goals = [
        f"results/{dataset}/clusters.csv",
        f"results/figures/{dataset}_classes.png",
        f"results/figures/{dataset}_stability.png",
        "results/tables/summary.csv",
        f"results/{dataset}/exports/classes.mrcs",
    ]
    if aligned:
        goals.append(f"results/{dataset}/exports/aligned.tif")
    return goals


def top_level(dataset: str = DATASET, star: bool = True, aligned: bool = False) -> dict:
    """Name at the top of ``OUT`` -> the workflow's file it copies."""
    exports = f"results/{dataset}/exports"
    files = {
        "clusters.csv": f"results/{dataset}/clusters.csv",
        "classes.png": f"results/figures/{dataset}_classes.png",
        "stability.png": f"results/figures/{dataset}_stability.png",
        "summary.csv": "results/tables/summary.csv",
        "classes.mrcs": f"{exports}/classes.mrcs",
        "classes.tif": f"{exports}/classes.tif",
        "particles.mrcs": f"{exports}/particles.mrcs",
    }
    if star:
        files["particles.star"] = f"{exports}/particles.star"
    if aligned:
        files["aligned.tif"] = f"{exports}/aligned.tif"
    return files


@dataclass
class RunResult:
    """What a finished run did and left: ``written`` (name at the top of ``out`` -> path),
    the ``sizes`` of the clusters (largest first), ``n_images``, the ``seconds`` it took,
    ``jobs`` run (0: nothing had changed), the run's ``log`` file, the ``n_clusters`` given
    (None: found), ``notes`` (one line each: what was left out and why)."""

    out: Path
    written: dict[str, Path]
    sizes: list[int]
    n_images: int
    seconds: float
    jobs: int
    log: Path
    n_clusters: int | tuple[int, int] | list[int] | None = None
    notes: list[str] = field(default_factory=list)
    selection: dict = field(default_factory=dict)


def summary_lines(result: RunResult, most: int = 12) -> list[str]:
    """The few lines the command ends with: the clusters and their sizes (the ``most``
    largest), where the results are, the time and the log; one line when nothing changed."""
    k = len(result.sizes)
    shown = ", ".join(str(s) for s in result.sizes[:most])
    if k > most:
        shown += f", ... ({k - most} more)"
    clusters = f"{k} cluster{'s' if k != 1 else ''} ({shown} images)"
    if result.jobs == 0:
        return [f"nothing changed since the last run: {result.out} is up to date ({clusters})"]
    how = "K given" if isinstance(result.n_clusters, int) else "K found by the read-out"
    if isinstance(result.n_clusters, (list, tuple)):
        how += f" in {result.n_clusters[0]}..{result.n_clusters[1]}"
    sel = result.selection
    if not isinstance(result.n_clusters, int) and sel.get("selection_confidence"):
        how += f" ({sel['selection_confidence']})"
    names = ", ".join(n for n in result.written if n != "config.yaml")
    return [
        f"{clusters} of {result.n_images} images, {how}",
        f"results in {result.out}: {names}",
        f"done in {result.seconds:.0f} s ({result.jobs} job{'s' if result.jobs != 1 else ''}); "
        f"workflow log {result.log}",
        *result.notes,
    ]


def count_images(checked: dict) -> int:
    """Images of the ``images`` data set of a validated config (from the headers)."""
    return dataset_size(checked, DATASET)


def check_raw_count(config: dict) -> None:
    """:func:`check_count` of a config not yet validated, where its images can be counted
    (from the headers) and its K is an int or a pair of them; nothing where they cannot (the
    config's validation then says why)."""
    ds = config["datasets"][DATASET]
    try:
        K = clusters_value(ds.get("settings", {}).get("n_clusters"), "n_clusters")
        n = dataset_size(config, DATASET)
    except Exception:  # a bad K or unreadable images: validate_config names them
        return
    check_count(ds["path"], n, K)


def check_count(path: str, n: int, n_clusters: int | list | tuple | None) -> None:
    """One-line InputError for fewer than two images, or a K (or either end of a range)
    above the n images."""
    if n < 2:
        raise InputError(f"{path}: holds {n} image; clustering needs at least 2")
    if isinstance(n_clusters, (list, tuple)):
        lo, hi = n_clusters
        if lo > n:
            raise InputError(f"--n-clusters {lo}:{hi}: more clusters than the {n} images")
        if hi > n:
            raise InputError(
                f"--n-clusters {lo}:{hi}: the range's upper end is above the {n} images"
            )
    elif n_clusters is not None and n_clusters > n:
        raise InputError(f"--n-clusters {n_clusters}: more clusters than the {n} images")


def run(
    config: dict,
    out: str | Path,
    cores: int = 2,
    snakefile: str | Path = SNAKEFILE,
    report: bool = False,
    unlock: bool = False,
    *,
    force: bool = False,
    aligned: bool = False,
    verbose: bool = False,
    stream=None,
) -> RunResult:
    """Check everything, run the workflow in ``out``, swap the new top-level results in.

    Every check runs before anything in ``out`` is written: the config, the output folder
    (not a file, writable, not inside the input folder, not holding another input's results
    unless ``force``), the number of images and K, every image (read once here: NaN/inf,
    constant images, sizes; warnings such as grayscale conversion are shown here, one line
    each), and a lock left by a killed run (``unlock=True`` removes it and the run resumes
    where it stopped). From its first write to its end the run holds ``out``
    (:func:`folder_lock`): a second run on the same folder is refused with one line.

    The top-level files of ``out`` (:data:`ia_stages.pipeline.out_folder.TOP_LEVEL`) change
    only when the run succeeds, all together; a failed or killed run leaves them as they were.

    Parameters
    ----------
    config : the workflow config (:func:`images_config`)
    out : the output folder
    cores : CPU cores for the workflow
    snakefile : the workflow (default: the package's)
    report : also write ``out/report.html``
    unlock : remove a killed run's lock and resume
    force : replace the results of another input held in ``out``
    aligned : also write ``aligned.tif``
    verbose : show the workflow's whole log live instead of one line per job
    stream : where the lines go (default ``sys.stderr``)

    Returns
    -------
    RunResult

    Raises
    ------
    ConfigError, DatasetError, InputError, BackendError
        one line naming the key, file or folder (or the missing GPU); nothing in ``out`` has
        changed when it is raised before the workflow starts.
    """
    started = time.time()
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise InputError(f"--cores must be an integer >= 1, got {cores!r}")
    snakefile = Path(snakefile)
    if not snakefile.is_file():
        raise InputError(f"{snakefile}: Snakefile not found (give --snakefile)")
    out = Path(out).resolve()
    source = config["datasets"][DATASET]["path"]
    out_folder.check_not_inside_input(out, source)
    try:
        checked = validate_config(config)  # one-line ConfigError before anything is written
    except ConfigError:
        check_raw_count(config)  # a K above the images: the flag's line, not the config key's
        raise
    check_out(out)
    K = checked["datasets"][DATASET]["settings"]["n_clusters"]
    n = count_images(checked)
    check_count(source, n, K)
    chosen, shape = check_images(checked)
    for name, sigma in chosen.items():  # 'auto' resolved on the pixels
        config["datasets"][name].setdefault("settings", {})["sigma"] = sigma
    check_lock(out, unlock)
    out_folder.check_owner(out, source, force)
    gpus = gpu_count(checked["backend"])  # BackendError for cupy without a GPU, before writing
    star = star_available()
    notes = [] if star else ["particles.star needs starfile: pip install 'ia-stages[relion]'"]
    goals = targets(star=star, aligned=aligned)
    # from here on ``out`` changes; its top-level files only at the swap
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        out_folder.recover(out)
        (out / FRONT).unlink(missing_ok=True)  # an earlier run's front page is not this run's
        out_folder.claim(out, source)
        work = out_folder.work_dir(out)
        config_text = yaml.safe_dump(config, sort_keys=False)
        cfg_path = work / "config.yaml"
        cfg_path.write_text(config_text)
        progress = work / "progress"
        progress.mkdir(exist_ok=True)
        for f in progress.glob("*.json"):
            f.unlink()
        log_path = out / "logs" / f"{time.strftime('%Y%m%d-%H%M%S')}.log"
        marker = out / RUN_MARKER
        marker.write_text(f"{os.getpid()}\n")
        header = f"ia-stages cluster: {n} images of {shape[1]} x {shape[2]} px from {source}"
        display = RunDisplay(out, log_path, progress, verbose=verbose, stream=stream, header=header)
        try:
            with display:
                snakemake(
                    snakefile,
                    out,
                    cfg_path,
                    goals,
                    cores,
                    report,
                    rerun_incomplete=unlock,
                    gpus=gpus,
                    display=display,
                    before_report=lambda: write_front_page(out, checked),
                )
        finally:
            marker.unlink(missing_ok=True)
        files = {name: out / src for name, src in top_level(star=star, aligned=aligned).items()}
        if report:
            files["report.html"] = out / "results" / "report.html"
        out_folder.swap_in(out, files, {"config.yaml": config_text})
        written = {name: out / name for name in ["config.yaml", *files]}
        table = pd.read_csv(written["clusters.csv"])
        sizes = sorted(table["cluster"].value_counts().tolist(), reverse=True)
        attrs = read_store(out / "results" / DATASET / "classes.zarr").attrs
        selection = {k: v for k, v in attrs.items() if k.startswith("selection_")}
        return RunResult(
            out, written, sizes, len(table), time.time() - started, len(display.finished),
            log_path, K, notes, selection,
        )  # fmt: skip


RUN_MARKER = ".ia-stages-run"
"""File in ``--out`` holding the process id of the run working there (removed at its end)."""


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``out`` for this run: an exclusive, non-blocking ``flock`` on the folder itself,
    which the system releases when the process ends however it ends. A second run started on
    the same folder while this one holds it (before the first has written its marker or taken
    Snakemake's locks) gets one InputError line and changes nothing there.

    Example
    -------
    >>> with folder_lock(Path(tempfile.mkdtemp())):  # doctest: +SKIP
    ...     pass
    """
    import fcntl

    fd = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _marker_pid(out / RUN_MARKER)
            who = f" (process {pid})" if pid is not None else ""
            raise InputError(
                f"{out}: another run{who} is working in this folder; wait for it to end"
            ) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


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


def check_images(config: dict) -> tuple[dict[str, float], tuple[int, int, int]]:
    """Read every image of the config's ``images`` data sets once, before any job: a bad one
    stops the run with one DatasetError line naming the file and its index. Warnings (RGB
    converted to grayscale, images padded or cropped) reach the console from here.

    Returns the smoothing that ``sigma='auto'`` chooses from these pixels for each data set
    whose tree has it (:func:`ia_stages.ia.prepare.resolve_sigma`), for the run's config file
    and hashes to hold the number, and the shape ``(n, H, W)`` of the (last) data set's images
    as the jobs will see them."""
    chosen = {}
    shape = (0, 0, 0)
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
        shape = images.data.shape
    return chosen, shape


def check_lock(out: Path, unlock: bool) -> None:
    """One-line InputError when a run holds ``out`` or a killed one left its lock; with
    ``unlock`` a killed run's lock is removed (Snakemake's unlock) and the run resumes."""
    locks = out / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()):
        return
    with folder_lock(out):  # a live run holds it: one line naming that run
        pass
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
    display=None,
    before_report=None,
) -> None:
    """Run the workflow through Snakemake's API: the one runner of the command and the tests.

    ``gpus`` > 0 caps the jobs holding a GPU at once (``--resources gpu=N``), so that each
    finds a free device instead of waiting on another job's lock with a core held.

    ``display`` (a :class:`~ia_stages.pipeline.run_display.RunDisplay`) takes every log record
    through the ``ia-stages`` logger plugin, and the jobs write their progress files into its
    folder; without it Snakemake's own lines go to the console. ``report`` writes
    ``workdir/results/report.html``, after calling ``before_report()`` when given.

    When a job fails, the line its stage wrote to its log (``ia-stages <stage>: error: ...``,
    else the log's last line) is raised as the InputError's message, with the log's path.
    """
    import immutables  # lazy: snakemake takes a second to load; only this command runs it
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

    if display is None:
        output = OutputSettings(quiet={"progress", "rules", "host"}, dryrun=dryrun)
    else:
        output = OutputSettings(
            dryrun=dryrun,
            log_handler_settings=plugin_settings(display),
            enable_file_logging=False,  # the display writes the whole log
        )
    previous = os.environ.get(PROGRESS_DIR)
    if display is not None and display.progress_dir is not None:
        os.environ[PROGRESS_DIR] = str(display.progress_dir)
    started = time.time()
    try:
        with SnakemakeApi(output) as api:
            dag = workflow(api).dag(DAGSettings(targets=goals, force_incomplete=rerun_incomplete))
            dag.execute_workflow(
                executor="dryrun" if dryrun else "local", execution_settings=ExecutionSettings()
            )
        if report:
            if before_report is not None:
                before_report()
            with SnakemakeApi(output) as api:
                workflow(api).dag(DAGSettings(targets=goals)).create_report(
                    reporter="html",
                    report_settings=ReportSettings(path=workdir / "results" / "report.html"),
                )
    except (ConfigError, InputError):
        raise
    except Exception as err:  # Snakemake reports a failed job as one of many exception kinds
        where = f"; full log: {display.log_path}" if display is not None else ""
        reason = None
        if display is not None and display.failures:
            failure = display.failures[0]
            reason = _log_error(failure.logs, failure.label)
        if reason is None:
            reason = _job_error(workdir / "results" / "logs", started)
        if reason is None:
            text = str(err).strip()
            reason = text.splitlines()[0] if text else type(err).__name__
            if display is None:
                reason += f"; see the logs in {workdir / 'results' / 'logs'}"
        raise InputError(f"the workflow stopped: {reason}{where}") from None
    finally:
        if display is not None:
            if previous is None:
                os.environ.pop(PROGRESS_DIR, None)
            else:
                os.environ[PROGRESS_DIR] = previous


def _log_error(logs: list[str], label: str) -> str | None:
    """The failing job's own error: the ``ia-stages <stage>: error:`` line of its log, else the
    log's last line (a traceback's exception), with the stage and the log's path."""
    for path in logs:
        try:
            lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
        except OSError:
            continue
        lines = [ln for ln in lines if ln and "it/s]" not in ln and "s/it]" not in ln]
        if not lines:
            continue
        line = next((ln for ln in lines if ln.startswith("ia-stages ") and ": error: " in ln),
                    None)  # fmt: skip
        text = line.split(": error: ", 1)[1] if line else lines[-1]
        return f"{label}: {text} (job log {path})"
    return None


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
