"""The one way the package runs tasks on threads: compiled kernels that release Python's lock
(numba ``nogil``) and BLAS products, side by side."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from threadpoolctl import threadpool_limits


def on_threads(task: Callable[[Any], Any], args: Iterable[Any], workers: int) -> Iterator[Any]:
    """Yield ``task(a)`` for every ``a``, in order, computed on ``workers`` threads with BLAS on
    one thread each, at most that many ahead of the consumer.

    BLAS's own worker threads would keep spinning for a while after each product and slow the
    compiled kernels that follow.

    Example
    -------
    >>> list(on_threads(lambda a: a * a, range(4), 2))
    [0, 1, 4, 9]
    """
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        pending: deque = deque()
        for a in args:
            pending.append(pool.submit(task, a))
            if len(pending) >= workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


_RANGE_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (process id, workers, pool)
_IN_RANGE = threading.local()  # set while a thread runs one of on_ranges' ranges


def _range_pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool for :func:`on_ranges`, made on first use (and again in a forked
    child, which has none of its parent's threads, or when more workers are asked for)."""
    global _RANGE_POOL
    pid = os.getpid()
    if _RANGE_POOL is None or _RANGE_POOL[0] != pid or _RANGE_POOL[1] < workers:
        pool = ThreadPoolExecutor(workers, thread_name_prefix="ia-stages-ranges")
        _RANGE_POOL = (pid, workers, pool)
    return _RANGE_POOL[2]


def on_ranges(kernel: Callable[[int, int], Any], n: int) -> None:
    """Run ``kernel(lo, hi)`` over ``0..n-1`` split into one contiguous range per thread, on
    numba's thread count (:func:`numba.get_num_threads`); the first range runs on the calling
    thread, the others on a pool kept for the process.

    The CPU driver of the package's compiled loops and of array code that releases Python's
    lock (scipy's filters, numpy's copies): ``kernel`` works on items ``lo..hi-1``. This is
    the static split numba's ``prange`` makes, with no parallel loop for numba to compile on a
    first call (a large share of a cold start). Called again inside a range (a kernel whose
    work calls a function that splits its own), it runs ``kernel(0, n)`` on that thread: the
    ranges already hold every thread, and a range waiting on the pool it runs in would wait
    forever. An exception in any range is raised here, after every range has ended.

    Example
    -------
    >>> seen = []
    >>> on_ranges(lambda lo, hi: seen.append((lo, hi)), 5)
    >>> sorted(seen)[0][0], sorted(seen)[-1][1]
    (0, 5)
    """
    if n <= 0:
        return
    if getattr(_IN_RANGE, "active", False):
        kernel(0, n)
        return
    threads = max(1, min(_numba_threads(), n))
    step = -(-n // threads)
    others = range(step, n, step)
    pool = _range_pool(len(others)) if others else None
    futures = [pool.submit(_in_range, kernel, lo, min(lo + step, n)) for lo in others]
    try:
        _in_range(kernel, 0, min(step, n))
    finally:
        for f in futures:  # every range ends before this returns or raises
            f.exception()
    for f in futures:
        f.result()


def threads_here() -> int:
    """The threads work started here may use: 1 inside a range of :func:`on_ranges` (the
    ranges hold every thread), else numba's thread count (e.g. a library's ``workers``).

    Example
    -------
    >>> threads_here() >= 1
    True
    """
    return 1 if getattr(_IN_RANGE, "active", False) else _numba_threads()


def _numba_threads() -> int:
    """numba's thread count, numba imported here: this module is below every stage, and a
    stage that runs no kernel (a gather) loads no numba."""
    import numba  # lazy: numba costs a gather job's start-up, which uses none of it

    return numba.get_num_threads()


def _in_range(kernel: Callable[[int, int], Any], lo: int, hi: int) -> Any:
    """``kernel(lo, hi)`` with this thread marked as running a range of :func:`on_ranges`."""
    _IN_RANGE.active = True
    try:
        return kernel(lo, hi)
    finally:
        _IN_RANGE.active = False
