"""Pin a GPU job to one device.

When several GPU jobs run at once on one machine (``snakemake --cores 8 --resources gpu=4``),
each must use its own GPU. Snakemake's local executor limits how many run but does not say which
device each gets, so every job claims one with an exclusive file lock held for its lifetime:
with at most N jobs for N GPUs a free device always exists. Under SLURM the scheduler already
restricts ``CUDA_VISIBLE_DEVICES`` to the job's GPUs; the lock then picks among those.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import IO

from ia_stages.core.backend import BackendError, cupy_module, resolve_backend

_held: list[IO] = []  # lock files kept open (and locked) until the process exits


def lock_dir() -> Path:
    """Folder of the device locks: ``$IA_STAGES_GPU_LOCKS`` or ``<tmp>/ia-stages-gpu-locks``."""
    default = Path(tempfile.gettempdir()) / "ia-stages-gpu-locks"
    return Path(os.environ.get("IA_STAGES_GPU_LOCKS", default))


def device_names(n_devices: int) -> list[str]:
    """Names of the visible devices (physical ids from ``CUDA_VISIBLE_DEVICES`` when set)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    names = [v.strip() for v in visible.split(",") if v.strip()] if visible else []
    return names[:n_devices] if names else [str(k) for k in range(n_devices)]


def claim_device(n_devices: int, folder: Path | None = None, timeout: float = 600.0) -> int:
    """Lock and return the index (among visible devices) of a GPU no other job holds.

    Waits up to ``timeout`` seconds for one to become free, then raises
    :class:`~ia_stages.core.backend.BackendError`.
    """
    if n_devices < 1:
        raise BackendError("no GPU visible to claim")
    folder = folder or lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    names = device_names(n_devices)
    deadline = time.monotonic() + timeout
    while True:
        for index, name in enumerate(names):
            handle = open(folder / f"gpu-{name}.lock", "a+")  # held open: the lock lives with it
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            _held.append(handle)
            return index
        if time.monotonic() > deadline:
            raise BackendError(f"all {n_devices} GPUs are held by other jobs (locks in {folder})")
        time.sleep(0.5)


def pin_cupy_device() -> int:
    """Claim a free GPU and make it cupy's current device; returns its index."""
    cupy = cupy_module()
    index = claim_device(cupy.cuda.runtime.getDeviceCount())
    cupy.cuda.Device(index).use()
    return index


def gpu_count(backend: str) -> int:
    """How many GPUs the workflow's jobs may hold at once under ``backend``.

    Parameters
    ----------
    backend : str
        ``auto``, ``numpy`` or ``cupy`` (the config's ``backend``).

    Returns
    -------
    int
        0 when ``backend`` resolves to numpy, else the number of CUDA devices cupy sees (those
        in ``CUDA_VISIBLE_DEVICES`` when it is set).

    Example
    -------
    >>> gpu_count("numpy")
    0
    """
    if resolve_backend(backend) == "numpy":
        return 0
    return int(cupy_module().cuda.runtime.getDeviceCount())
