"""The per-pair search kernel compiled in a background process while a job's first steps run.

numba compiles :func:`ia_stages.kmax.search_kernels._search_range` once per install and keeps it in
its cache (``cache=True``). On a fresh install that compile would stall the first kNN job at its
first search, after the images, features and candidates were made on the job's own cores; a second
process compiles it while those steps run instead, and the job loads it from the cache when it needs
it. Nothing here changes a result: the kernel read from the cache is the one this process would have
compiled, and where the background compile fails or cannot help (the kernel is cached already, numba
cannot cache, a GPU runs the search) the job compiles as before.

Example
-------
>>> with search_compiled_ahead(20.0, "unit", SE2(), search, 1.0) as ready:  # doctest: +SKIP
...     features = ...  # the job's first steps
...     ready()
...     result = kappa_max(...)
"""

from __future__ import annotations

import base64
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ia_stages.core.groups import SE2, AffineFamily
from ia_stages.kmax.search_kernels import _search_range
from ia_stages.settings.search import SearchSettings

log = logging.getLogger("ia_stages")

WAIT_LIMIT_S = 600  # the background compile is given up (killed) after this long
AHEAD_MIN_IMAGES = 5000
"""Images from which the kNN path's first steps (features, candidates) take longer than a
background process needs to start: below it the search kernel is compiled where it is used."""


def worth_compiling_ahead(n: int, backend: str) -> bool:
    """Whether a kNN search of ``n`` images on ``backend`` ('numpy', 'cupy') compiles its
    CPU kernel ahead (:data:`AHEAD_MIN_IMAGES`; a GPU search does not use it).

    Example
    -------
    >>> worth_compiling_ahead(20_000, "numpy"), worth_compiling_ahead(20_000, "cupy")
    (True, False)
    """
    return backend == "numpy" and n >= AHEAD_MIN_IMAGES


def search_kernel_cached() -> bool:
    """Whether the search kernel needs no compile ahead: numba's cache holds a build of it, or
    numba cannot cache it (nothing a second process compiles would reach this one).

    Example
    -------
    >>> isinstance(search_kernel_cached(), bool)
    True
    """
    cache_file = getattr(getattr(_search_range, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return index is None or Path(index).exists()


def start_search_compile(
    beta: float, normalization: str, group: SE2 | AffineFamily, search: SearchSettings,
    sigma: float,
) -> subprocess.Popen | None:  # fmt: skip
    """Start a process that compiles the search kernel (into numba's cache) as
    ``kappa_max(..., beta, normalization, group, search, sigma=sigma)`` calls it, by running
    that on three small images; None where the kernel is cached already
    (:func:`search_kernel_cached`) or numba's JIT is off.

    Parameters
    ----------
    beta, normalization, group, sigma : as :func:`ia_stages.kmax.kappa_max`
    search : :class:`ia_stages.kmax.SearchSettings`, the search's settings

    Returns
    -------
    subprocess.Popen or None
        Pass it to :func:`wait_for` before the first search.
    """
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0") or search_kernel_cached():
        return None
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    code = "from ia_stages.kmax.compile_ahead import _main; _main()"
    given = base64.b64encode(pickle.dumps((beta, normalization, group, search, sigma)))
    return subprocess.Popen(
        [sys.executable, "-c", code, given.decode()],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(process: subprocess.Popen | None, limit: float = WAIT_LIMIT_S) -> None:
    """Wait until ``process`` (from :func:`start_search_compile`) has compiled the kernel;
    where it failed or ran past ``limit`` seconds, say so in the log and go on (the caller's
    first search then compiles the kernel itself).

    Example
    -------
    >>> wait_for(None)
    """
    if process is None:
        return
    try:
        _, err = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        log.warning("the search kernel's background compile ran past %s s: compiling here", limit)
        return
    if process.returncode != 0:
        last = (err or "").strip().splitlines()[-1:] or ["no message"]
        log.warning(
            "the search kernel's background compile failed (exit %s: %s): compiling here",
            process.returncode,
            last[0],
        )


@contextmanager
def search_compiled_ahead(
    beta: float, normalization: str, group: SE2 | AffineFamily, search: SearchSettings,
    sigma: float, on: bool = True,
) -> Iterator[Callable[[], None]]:  # fmt: skip
    """Compile the search kernel in a background process (:func:`start_search_compile`; not
    when ``on`` is False) while the block runs; yields ``ready``, to call before the block's
    first search (:func:`wait_for`). A background process still running when the block ends
    (it raised before ``ready``) is killed.

    Example
    -------
    >>> with search_compiled_ahead(20.0, "unit", SE2(), SearchSettings(), 1.0, on=False) as ready:
    ...     ready()
    """
    process = start_search_compile(beta, normalization, group, search, sigma) if on else None
    try:
        yield lambda: wait_for(process)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
            process.communicate()


def _main() -> None:
    """The background process: one kappa^max among three small images under the settings
    :func:`start_search_compile` pickled into ``sys.argv[1]``."""
    # lazy: a cycle: ia_stages.kmax imports this module (through kmax.candidates)
    from ia_stages.kmax import kappa_max

    beta, normalization, group, search, sigma = pickle.loads(base64.b64decode(sys.argv[1]))
    yy, xx = np.mgrid[:24, :24] - 11.5
    images = np.stack(
        [np.exp(-((yy - dy) ** 2 + (xx - dx) ** 2) / 18.0) for dy, dx in ((0, 0), (3, -2), (-4, 1))]
    )
    kappa_max(images, beta=beta, normalization=normalization, group=group, settings=search,
              sigma=sigma)  # fmt: skip
