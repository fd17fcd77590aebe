"""The output folder of ``ia-stages cluster``: whose results it holds, and the swap that
replaces its top-level files only when a run has succeeded.

``OUT`` holds the top-level results a person opens (:data:`TOP_LEVEL`), ``results/`` (the
workflow's stores and job logs), ``logs/`` (one log per run) and ``.ia-stages/`` (the
command's own files: which input the folder belongs to, the running config, the jobs'
progress files, the next results while they are swapped in).

The swap writes every new top-level file into ``.ia-stages/next/``, marks the set complete,
then renames each into place. A run that fails or is killed before the mark leaves the earlier
files as they were (the half-made set is discarded by the next run); one killed during the
renames is finished by the next run (:func:`recover`), so the top level is never a mix of two
runs once a command has started.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import yaml

from ia_stages.pipeline.stages.common import InputError

TOP_LEVEL = (
    "config.yaml",
    "clusters.csv",
    "classes.png",
    "stability.png",
    "summary.csv",
    "classes.mrcs",
    "classes.tif",
    "particles.star",
    "particles.mrcs",
    "aligned.tif",
    "report.html",
)
"""Every file the command may put at the top of ``OUT``."""

WORK = ".ia-stages"
"""The command's own folder inside ``OUT``."""
_OWNER = "input.json"
_NEXT = "next"
_COMPLETE = ".complete"
_OURS = {*TOP_LEVEL, "results", "logs", ".snakemake", WORK, ".ia-stages-run"}


def work_dir(out: Path) -> Path:
    """``OUT/.ia-stages``."""
    return Path(out) / WORK


def check_not_inside_input(out: Path, path: Path) -> None:
    """One-line InputError when ``out`` is the input folder or inside it: the folder's reader
    would take the command's own PNGs for images on the next run."""
    out, path = Path(out).resolve(), Path(path).resolve()
    if path.is_dir() and path.suffix.lower() != ".zarr" and out.is_relative_to(path):
        raise InputError(
            f"--out {out}: is inside the input folder {path}; the next run would read its "
            "outputs as images. Give an --out outside it"
        )


def owner(out: Path) -> str | None:
    """The input path whose results ``out`` holds (None: none recorded). A folder made before
    the record existed is known by its ``config.yaml``."""
    record = work_dir(out) / _OWNER
    try:
        return str(json.loads(record.read_text())["path"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        cfg = yaml.safe_load((Path(out) / "config.yaml").read_text())
        return str(next(iter(cfg["datasets"].values()))["path"])
    except Exception:  # no config, or not one of ours: no owner
        return None


def check_owner(out: Path, path: Path, force: bool = False) -> None:
    """One-line InputError unless ``out`` is new, empty, or holds results of ``path``.

    A folder holding another input's results, or files no run of the command made, is
    refused unless ``force``; nothing is changed here."""
    out = Path(out)
    if force or not out.is_dir():
        return
    previous = owner(out)
    if previous is not None:
        if Path(previous).resolve() != Path(path).resolve():
            raise InputError(
                f"--out {out}: holds the results of another input ({previous}); give another "
                "--out, or --force to replace them"
            )
        return
    foreign = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    foreign = [name for name in foreign if name not in _OURS]
    if foreign:
        raise InputError(
            f"--out {out}: holds files this command did not make ({foreign[0]}"
            f"{', ...' if len(foreign) > 1 else ''}); give a new or empty folder, or --force"
        )


def claim(out: Path, path: Path) -> None:
    """Record that ``out`` holds the results of ``path``."""
    work = work_dir(out)
    work.mkdir(parents=True, exist_ok=True)
    _write_atomic(work / _OWNER, json.dumps({"path": str(Path(path).resolve())}) + "\n")


def recover(out: Path) -> bool:
    """Finish a swap a killed run left complete, or discard an incomplete one. Returns True
    when a swap was finished."""
    nxt = work_dir(out) / _NEXT
    if not nxt.is_dir():
        return False
    if (nxt / _COMPLETE).is_file():
        _apply(out, nxt)
        return True
    shutil.rmtree(nxt, ignore_errors=True)
    return False


def swap_in(out: Path, files: dict[str, Path], texts: dict[str, str] | None = None) -> None:
    """Replace the top-level files of ``out`` by ``files`` (name -> source, copied) and
    ``texts`` (name -> content): all of them, or none when interrupted before the set is
    complete. Top-level files of :data:`TOP_LEVEL` that the new set lacks are removed, so
    every file at the top belongs to the same run."""
    out = Path(out)
    nxt = work_dir(out) / _NEXT
    shutil.rmtree(nxt, ignore_errors=True)
    nxt.mkdir(parents=True)
    for name, src in files.items():
        shutil.copyfile(src, nxt / name)
    for name, text in (texts or {}).items():
        (nxt / name).write_text(text)
    stale = [n for n in TOP_LEVEL if n not in files and n not in (texts or {})]
    _write_atomic(nxt / _COMPLETE, json.dumps({"remove": stale}) + "\n", sync=True)
    _apply(out, nxt)


def _apply(out: Path, nxt: Path) -> None:
    plan = json.loads((nxt / _COMPLETE).read_text())
    for f in sorted(nxt.iterdir()):
        if f.name != _COMPLETE:
            os.replace(f, Path(out) / f.name)
    for name in plan.get("remove", []):
        (Path(out) / name).unlink(missing_ok=True)
    shutil.rmtree(nxt, ignore_errors=True)


def _write_atomic(path: Path, text: str, sync: bool = False) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
