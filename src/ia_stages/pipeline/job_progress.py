"""Progress of a running job, in a small file the ``cluster`` command reads.

A stage job draws its tqdm bar on its stderr, which the workflow sends to the job's log. When
the environment names a folder (:data:`PROGRESS_DIR`, set by ``ia-stages cluster`` for its
jobs), the job also keeps one JSON file there up to date: its output path, the bar's label,
the count and the total. The command polls the folder and draws the bars itself; nothing
parses a log's text. Without the variable (a plain ``snakemake`` run) nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

PROGRESS_DIR = "IA_STAGES_PROGRESS_DIR"
"""Environment variable: the folder a job writes its progress file into."""


def progress_file(folder: str | Path, out: str | Path) -> Path:
    """The progress file of the job writing ``out`` (its absolute path, hashed)."""
    key = hashlib.blake2b(str(Path(out).resolve()).encode(), digest_size=10).hexdigest()
    return Path(folder) / f"{key}.json"


@dataclass
class JobProgress:
    """One job's progress as its file says: ``out`` (absolute path of the job's output),
    ``label`` of its current bar, ``n`` done of ``total`` (None: unknown)."""

    out: str
    label: str
    n: float
    total: float | None


class ProgressWriter:
    """Keeps a job's progress file up to date, at most every ``interval`` seconds.

    Parameters
    ----------
    out : the job's output path (the key the command finds the job by)
    folder : where to write (default: the :data:`PROGRESS_DIR` variable; unset: write nothing)
    interval : float, default 0.5
        seconds between writes (the last state is always written by :meth:`close`)

    Example
    -------
    >>> w = ProgressWriter("results/x.zarr", folder=None)  # no folder: a no-op
    >>> w.update("pairs", 3, 10); w.close()
    """

    def __init__(
        self, out: str | Path | None, folder: str | Path | None = None, interval: float = 0.5
    ) -> None:
        folder = os.environ.get(PROGRESS_DIR) if folder is None else folder
        self.path = progress_file(folder, out) if folder and out else None
        self.out = str(Path(out).resolve()) if out else ""
        self.interval = interval
        self._last = 0.0
        self._state: tuple[str, float, float | None] | None = None

    def update(self, label: str, n: float, total: float | None) -> None:
        """Record the bar's state; written when ``interval`` has passed since the last write."""
        self._state = (label, n, total)
        now = time.monotonic()
        if self.path is not None and now - self._last >= self.interval:
            self._write()
            self._last = now

    def close(self) -> None:
        """Write the last state."""
        if self.path is not None and self._state is not None:
            self._write()

    def _write(self) -> None:
        label, n, total = self._state  # type: ignore[misc]
        text = json.dumps({"out": self.out, "label": label, "n": n, "total": total})
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            tmp.replace(self.path)
        except OSError:  # progress is a courtesy: never fail a job for it
            pass


def read_progress(folder: str | Path) -> dict[str, JobProgress]:
    """Every job's progress in ``folder``, by the job's absolute output path."""
    found: dict[str, JobProgress] = {}
    try:
        files = list(Path(folder).glob("*.json"))
    except OSError:
        return found
    for f in files:
        try:
            d = json.loads(f.read_text())
            found[d["out"]] = JobProgress(d["out"], str(d["label"]), d["n"], d["total"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being replaced, or not ours
    return found
