"""Installed as users install it: a wheel (not an editable install of this clone) runs
``ia-stages cluster`` from another folder, finding its workflow inside the package."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

from .test_trust import write_digits

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_install_runs_the_cluster_command_from_another_folder(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = wheels.glob("ia_stages-*.whl")
    env_dir = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    # the new environment alone: a PYTHONPATH (a test run from another checkout) would shadow it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}"
    # the dependencies come from this environment's site-packages (nothing is downloaded);
    # a path added by a .pth file does not run that folder's own .pth files, so this clone's
    # editable install stays out of the new environment
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True, env=env,
        ).stdout.strip()
    )  # fmt: skip
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, capture_output=True, text=True, env=env,
    )  # fmt: skip
    where = subprocess.run(
        [str(py), "-c", "import ia_stages; print(ia_stages.__file__)"],
        check=True, capture_output=True, text=True, cwd=tmp_path, env=env,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(env_dir), where

    src, elsewhere = tmp_path / "png", tmp_path / "elsewhere"
    write_digits(src, 4)  # 12 images
    elsewhere.mkdir()
    proc = subprocess.run(
        [str(env_dir / "bin" / "ia-stages"), "cluster", str(src), "--out", "out",
         "--iterations", "1", "--mean-steps", "3", "--mean-images", "4"],
        cwd=elsewhere, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(elsewhere / "out" / "clusters.csv")
    assert sorted(table.name) == sorted(str(p.relative_to(src)) for p in src.rglob("*.png"))
    (log,) = (elsewhere / "out" / "logs").glob("*.log")  # the workflow's whole log
    assert f"Snakefile: {env_dir}" in log.read_text()  # Snakemake read the packaged Snakefile
