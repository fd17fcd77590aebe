"""What ``ia-stages cluster`` shows while the workflow runs: one line per finished job, a bar
per running job on a terminal, the whole Snakemake log in a file.

The workflow's messages reach :class:`LogHandler`, a Snakemake logger plugin (the interface of
``snakemake-interface-logger-plugins``, registered by :func:`register`; ``--logger ia-stages``
names it), as log records that carry their event and fields (the job's rule, wildcards, output
and log files), so nothing here parses Snakemake's text. Every record goes to the log file,
formatted as Snakemake formats it; ``verbose`` also shows it live. The running jobs' counts come
from their progress files (:mod:`ia_stages.pipeline.job_progress`).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent
from snakemake_interface_logger_plugins.settings import LogHandlerSettingsBase
from tqdm import tqdm

from ia_stages.pipeline.job_progress import JobProgress, read_progress

PLUGIN = "ia-stages"
"""The logger plugin's name (``snakemake --logger ia-stages``)."""

# what each rule's line says: a label (with the wildcards) and the noun of its count
_STAGES: dict[str, tuple[str, str]] = {
    "dataset": ("read the images", "images"),
    "kmax_whole": ("kappa^max, iteration {t}", "pairs"),
    "kmax_block": ("kappa^max, iteration {t}, block {bi},{bj}", "pairs"),
    "kmax_gather": ("kappa^max, iteration {t}, gathered", ""),
    "knn_whole": ("kNN lists, iteration {t}", "pairs"),
    "knn_features": ("kNN features, iteration {t}", ""),
    "knn_block": ("kNN lists, iteration {t}, rows {bi}", "pairs"),
    "knn_expand": ("kNN second pass, iteration {t}, rows {bi}", "pairs"),
    "knn_gather": ("kNN lists, iteration {t}, gathered", ""),
    "means_whole": ("invariant means, iteration {t}", "means"),
    "means": ("invariant means, iteration {t}, columns {cb}", "means"),
    "means_gather": ("invariant means, iteration {t}, gathered", ""),
    "classes": ("clusters and class averages", "images"),
    "figure_clusters": ("gallery and stability figures", ""),
    "exports": ("exports: MRC, TIFF and STAR files", ""),
    "export_aligned": ("aligned members: TIFF", "images"),
    "metrics": ("metrics", ""),
    "tables": ("summary table", ""),
}


def stage_label(rule: str, wildcards: dict[str, Any]) -> str:
    """The line's label of a job of ``rule`` (its wildcards filled in)."""
    label = _STAGES.get(rule, (rule.replace("_", " "), ""))[0]
    try:
        return label.format(**wildcards)
    except (KeyError, IndexError):
        return rule.replace("_", " ")


@dataclass
class _Job:
    rule: str
    label: str
    outputs: list[str]
    logs: list[str]
    started: float
    progress: JobProgress | None = None
    bar: Any = None


@dataclass
class JobFailure:
    """A job that failed: its rule and its log files (absolute paths)."""

    rule: str
    label: str
    logs: list[str] = field(default_factory=list)


class RunDisplay:
    """The console and log file of one workflow run.

    Parameters
    ----------
    workdir : Path
        the workflow's working directory (the job's relative paths are resolved in it)
    log_path : Path
        the file every Snakemake record is written to
    progress_dir : Path or None
        where the jobs write their progress files (None: no bars)
    verbose : bool, default False
        show every record live instead of one line per job
    stream : text stream, default ``sys.stderr``
    bars : bool or None, default None
        draw bars for the running jobs (None: when ``stream`` is a terminal)
    header : str or None
        a line shown before the first job starts (none when no job runs)
    """

    def __init__(
        self,
        workdir: Path,
        log_path: Path,
        progress_dir: Path | None = None,
        verbose: bool = False,
        stream: TextIO | None = None,
        bars: bool | None = None,
        header: str | None = None,
    ) -> None:
        # lazy: snakemake takes a second to load; only the cluster command's log uses it
        from snakemake.logging import DefaultFormatter

        self.workdir = Path(workdir)
        self.log_path = Path(log_path)
        self.progress_dir = progress_dir
        self.verbose = verbose
        self.stream = stream or sys.stderr
        self.bars = (self.stream.isatty() if bars is None else bars) and not verbose
        self.header = header
        self.formatter = DefaultFormatter()
        self.jobs: dict[int, _Job] = {}
        self.finished: list[tuple[str, float]] = []
        self.failures: list[JobFailure] = []
        self._lock = threading.Lock()
        self._log: TextIO | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # lifetime ---------------------------------------------------------------------------

    def __enter__(self) -> RunDisplay:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "a")  # closed by __exit__
        if self.progress_dir is not None:
            self._poller = threading.Thread(target=self._poll, daemon=True)
            self._poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=2)
        with self._lock:
            for job in self.jobs.values():
                self._close_bar(job)
        if self._log is not None:
            self._log.close()

    # records ----------------------------------------------------------------------------

    def record(self, record: logging.LogRecord) -> None:
        """Take one Snakemake log record: into the file, and onto the console as a line when
        it ends a job (every record with ``verbose``)."""
        text = self.formatter.format(record)
        if self._log is not None and text:
            self._log.write(text.rstrip("\n") + "\n")
            self._log.flush()
        if self.verbose and text:
            print(text, file=self.stream, flush=True)
        event = getattr(record, "event", None)
        with self._lock:
            if event == LogEvent.JOB_INFO:
                self._started(record)
            elif event == LogEvent.JOB_FINISHED:
                self._finished(getattr(record, "job_id", None))
            elif event == LogEvent.JOB_ERROR:
                self._failed(record)

    def _abs(self, paths: Any) -> list[str]:
        return [str((self.workdir / p).resolve()) for p in (paths or [])]

    def _started(self, record: logging.LogRecord) -> None:
        if self.header is not None and not self.verbose:
            self._line(self.header)
        self.header = None
        rule = getattr(record, "rule_name", "") or ""
        wildcards = dict(getattr(record, "wildcards", {}) or {})
        self.jobs[record.jobid] = _Job(  # type: ignore[attr-defined]
            rule,
            stage_label(rule, wildcards),
            self._abs(getattr(record, "output", [])),
            self._abs(getattr(record, "log", [])),
            time.monotonic(),
        )

    def _finished(self, jobid: int | None) -> None:
        job = self.jobs.pop(jobid, None) if jobid is not None else None
        if job is None:
            return
        seconds = time.monotonic() - job.started
        self.finished.append((job.label, seconds))
        self._close_bar(job)
        if not self.verbose:
            self._line(f"  {job.label:<40} {self._count(job):>16} {seconds:6.1f} s")

    def _failed(self, record: logging.LogRecord) -> None:
        rule = getattr(record, "rule_name", "") or ""
        job = self.jobs.pop(getattr(record, "jobid", None), None)
        label = job.label if job else stage_label(rule, {})
        if job:
            self._close_bar(job)
        self.failures.append(JobFailure(rule, label, self._abs(getattr(record, "log", []))))

    @staticmethod
    def _count(job: _Job) -> str:
        noun = _STAGES.get(job.rule, ("", ""))[1]
        p = job.progress
        if not noun or p is None:
            return ""
        return f"{int(p.total if p.total else p.n):,} {noun}"

    def _line(self, text: str) -> None:
        if self.bars:
            tqdm.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    # bars -------------------------------------------------------------------------------

    def _poll(self) -> None:
        while not self._stop.wait(0.3):
            found = read_progress(self.progress_dir)  # type: ignore[arg-type]
            with self._lock:
                for job in self.jobs.values():
                    p = next((found[o] for o in job.outputs if o in found), None)
                    if p is not None:
                        job.progress = p
                        if self.bars:
                            self._draw(job)

    def _draw(self, job: _Job) -> None:
        p = job.progress
        if job.bar is None or job.bar.total != p.total:
            self._close_bar(job)
            job.bar = tqdm(
                total=p.total, desc=f"  {job.label}", file=self.stream, leave=False,
                position=len([j for j in self.jobs.values() if j.bar is not None]),
                bar_format="{desc}: {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} "
                "[{elapsed}<{remaining}]" if p.total else "{desc}: {n_fmt} [{elapsed}]",
            )  # fmt: skip
        job.bar.n = p.n
        job.bar.refresh()

    @staticmethod
    def _close_bar(job: _Job) -> None:
        if job.bar is not None:
            job.bar.close()
            job.bar = None


@dataclass
class LogHandlerSettings(LogHandlerSettingsBase):
    """The plugin's one setting: the :class:`RunDisplay` the records go to."""

    display: Any = None


class LogHandler(LogHandlerBase):
    """Snakemake's log records to a :class:`RunDisplay` (the plugin's handler)."""

    def __post_init__(self) -> None:
        self.display: RunDisplay = self.settings.display  # type: ignore[union-attr]

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.display.record(record)
        except Exception:  # a display error must not stop the workflow
            self.handleError(record)

    @property
    def writes_to_stream(self) -> bool:
        return True  # Snakemake's own console handler is then left out

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # every record: the log file holds them all

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False


def register() -> None:
    """Register this module as Snakemake's logger plugin :data:`PLUGIN` (once)."""
    # lazy: the registry of snakemake's logger plugins, for the cluster command only
    from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry

    registry = LoggerPluginRegistry()
    if not registry.is_installed(PLUGIN):
        registry.register_plugin(
            "snakemake_logger_plugin_" + PLUGIN.replace("-", "_"), sys.modules[__name__]
        )


def plugin_settings(display: RunDisplay) -> dict[str, LogHandlerSettings]:
    """``OutputSettings.log_handler_settings`` sending a run's records to ``display``."""
    register()
    return {PLUGIN: LogHandlerSettings(display=display)}


@contextmanager
def one_line_warnings(prog: str, stream: TextIO | None = None) -> Iterator[None]:
    """Show each warning as one line ``<prog>: warning: <message>`` (no file, line or source
    line), for the duration of the block."""
    stream = stream or sys.stderr
    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = " ".join(str(message).split())
        print(f"{prog}: warning: {text}", file=file or stream, flush=True)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
