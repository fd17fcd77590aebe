"""Array-backend selection: numpy always, cupy when installed and asked for.

Math modules never import cupy at module level; they take ``xp`` from their inputs
through :func:`array_module`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from ia_stages.settings.tree import check_setting


class BackendError(RuntimeError):
    """The requested backend is not available."""


def cupy_module() -> ModuleType:
    """The ``cupy`` module, imported on first use: cupy is optional (the ``gpu`` extra), so no
    module imports it at its top. Raises ImportError where it is not installed.

    Example
    -------
    >>> try:
    ...     xp = cupy_module()
    ... except ImportError:
    ...     xp = np
    >>> hasattr(xp, "asarray")
    True
    """
    import cupy  # lazy: cupy is optional (the gpu extra)

    return cupy


def array_module(*arrays: Any) -> ModuleType:
    """Return ``cupy`` if any array is a cupy array, else ``numpy``."""
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            return cupy_module()
    return np


def _cupy_usable() -> bool:
    try:
        return cupy_module().cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def resolve_backend(name: str) -> str:
    """Map ``auto|numpy|cupy`` to the backend that will actually run.

    ``auto`` picks cupy when it imports and sees a GPU, numpy otherwise; ``cupy`` without a
    usable GPU raises :class:`BackendError`.
    """
    check_setting("backend", name)
    if name == "numpy":
        return "numpy"
    usable = _cupy_usable()
    if name == "cupy" and not usable:
        raise BackendError("backend 'cupy' requested but cupy or a CUDA device is not available")
    return "cupy" if usable else "numpy"


def to_backend(array: Any, backend: str) -> Any:
    """Move ``array`` to ``backend`` ('numpy' or 'cupy')."""
    if backend == "cupy":
        return cupy_module().asarray(array)
    return to_numpy(array)


def to_numpy(array: Any) -> np.ndarray:
    """Return a numpy copy/view of a numpy or cupy array."""
    if type(array).__module__.startswith("cupy"):
        return array.get()
    return np.asarray(array)


def ndimage_module(xp: ModuleType) -> ModuleType:
    """Return ``scipy.ndimage`` or ``cupyx.scipy.ndimage`` to match ``xp``."""
    if xp is np:
        import scipy.ndimage  # lazy: a tenth of a second to import, and the kmax path needs none

        return scipy.ndimage
    import cupyx.scipy.ndimage  # lazy: cupy is optional

    return cupyx.scipy.ndimage


def fft_module(xp: ModuleType) -> ModuleType:
    """Return ``scipy.fft`` or ``cupyx.scipy.fft`` to match ``xp``."""
    if xp is np:
        import scipy.fft  # lazy: a tenth of a second to import, and the kmax path needs none

        return scipy.fft
    import cupyx.scipy.fft  # lazy: cupy is optional

    return cupyx.scipy.fft
