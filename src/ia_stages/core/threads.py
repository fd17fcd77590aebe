"""The one way the package runs tasks on threads: compiled kernels that release Python's lock
(numba ``nogil``) and BLAS products, side by side."""

from __future__ import annotations

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


def on_ranges(kernel: Callable[[int, int], Any], n: int) -> None:
    """Run ``kernel(lo, hi)`` over ``0..n-1`` split into one contiguous range per thread, on
    numba's thread count (:func:`numba.get_num_threads`); the first range runs on the calling
    thread.

    The CPU driver of the package's compiled loops: ``kernel`` calls an ``njit(nogil=True)``
    function over items ``lo..hi-1``. This is the static split numba's ``prange`` makes, with
    no parallel loop for numba to compile on a first call (a large share of a cold start).
    Plain threads, started per call: no pool to set up (or to lose across a fork), so a call
    on a few items costs little more than the kernel. An exception in any range is raised
    here, after every range has ended.

    Example
    -------
    >>> seen = []
    >>> on_ranges(lambda lo, hi: seen.append((lo, hi)), 5)
    >>> sorted(seen)[0][0], sorted(seen)[-1][1]
    (0, 5)
    """
    import numba

    if n <= 0:
        return
    threads = max(1, min(numba.get_num_threads(), n))
    step = -(-n // threads)
    errors: list[BaseException] = []

    def run(lo: int) -> None:
        try:
            kernel(lo, min(lo + step, n))
        except BaseException as error:  # raised again in the calling thread
            errors.append(error)

    others = [threading.Thread(target=run, args=(lo,)) for lo in range(step, n, step)]
    for t in others:
        t.start()
    run(0)
    for t in others:
        t.join()
    if errors:
        raise errors[0]
