"""The install's cost: wall time and size on disk of ``pip install`` of the package's core and of
its extras, each into a fresh virtual environment with pip's cache off.

Usage: python bench/install_footprint.py [--specs . .[test]] [--keep DIR] [--quick]

For each requirement spec (relative to the repository root, e.g. ``.`` for the core and
``.[test]`` for the test extra) a fresh ``venv`` is made, pip is upgraded in it (not timed),
and ``pip install --no-cache-dir SPEC`` is timed; the venv's size on disk (``du``) before and
after the install gives the installed size. Printed per spec: the time, the size, the number of
distributions installed, and both as a ratio of the last spec's (the reference, by default
``.[test]``). The network and the index's speed enter the time, so compare specs within one run.
``--quick`` installs the core alone without its dependencies (``--no-deps``): it checks the
script, not the footprint.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (``du -sb``)."""
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def _count(py: Path) -> int:
    """Distributions installed in the venv of interpreter ``py``."""
    out = subprocess.run(
        [str(py), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    )
    return len(out.stdout.split())


def measure(spec: str, where: Path, no_deps: bool = False) -> dict:
    """Install ``spec`` into a fresh venv under ``where``; its time (s), size (bytes), count."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "--no-cache-dir", "--quiet"]
    subprocess.run([*pip, "install", "--upgrade", "pip"], check=True)
    before = _du(venv)
    n_before = _count(py)
    t0 = time.perf_counter()
    extra = ["--no-deps"] if no_deps else []
    subprocess.run([*pip, "install", *extra, spec], check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    n_after = _count(py)
    # the build leaves the source tree's build/ and *.egg-info behind: not part of the install
    return {
        "spec": spec,
        "seconds": wall,
        "bytes": _du(venv) - before,
        "distributions": n_after - n_before,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="+", default=[".", ".[test]"])
    ap.add_argument("--keep", type=Path, default=None, help="keep the venvs under this folder")
    ap.add_argument("--quick", action="store_true", help="the core alone, --no-deps")
    a = ap.parse_args()
    if a.quick:
        a.specs = ["."]
    rows = []
    for spec in a.specs:
        where = Path(tempfile.mkdtemp(prefix="ia-install-", dir=a.keep))
        try:
            rows.append(measure(spec, where, a.quick))
        finally:
            if a.keep is None:
                shutil.rmtree(where, ignore_errors=True)
        r = rows[-1]
        print(
            f"{r['spec']:<12} {r['seconds']:7.1f} s  {r['bytes'] / 2**20:8.1f} MiB  "
            f"{r['distributions']:4d} distributions",
            flush=True,
        )
    ref = rows[-1]
    print(f"ratios against {ref['spec']}:")
    for r in rows:
        print(
            f"{r['spec']:<12} time {r['seconds'] / ref['seconds']:.2f}  "
            f"size {r['bytes'] / ref['bytes']:.2f}"
        )


if __name__ == "__main__":
    main()
