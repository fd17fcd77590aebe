"""Readers for the official MNIST (IDX) and affNIST (.mat) files.

Both raise ``DatasetError`` with the file's name on anything malformed.
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class LoaderError(ValueError):
    """A data file is missing or malformed; the message names it.

    A :class:`ValueError`, reported by the command line and the pipeline in one line.

    Examples
    --------
    >>> from ia_stages.data.loaders import LoaderError, read_idx
    >>> try:
    ...     read_idx("no-such-file.idx")
    ... except LoaderError as err:
    ...     print(err)
    no-such-file.idx: file does not exist
    """


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise LoaderError(f"{path}: file does not exist")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError) as err:
        raise LoaderError(f"{path}: cannot be read ({err})") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (MNIST's format; ``.gz`` allowed) into an array of its stored shape.

    Layout: two zero bytes, a type code, the number of dimensions, each dimension as a
    big-endian uint32, then the data in C order.

    Parameters
    ----------
    path : str or pathlib.Path
        the file (gzip-compressed when its name ends in ``.gz``)

    Returns
    -------
    ndarray
        of the stored shape and type

    Raises
    ------
    LoaderError
        one line naming the file: missing, not IDX, truncated or of the wrong length

    Examples
    --------
    >>> import struct, tempfile, pathlib
    >>> import numpy as np
    >>> from ia_stages.data.loaders import read_idx
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "tiny-idx3-ubyte"
    >>> _ = f.write_bytes(bytes([0, 0, 0x08, 2]) + struct.pack(">2I", 2, 3) + bytes(range(6)))
    >>> read_idx(f).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_TYPES:
        raise LoaderError(f"{path}: not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise LoaderError(f"{path}: truncated IDX header")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(IDX_TYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise LoaderError(
            f"{path}: IDX data has {len(raw) - header} bytes, header says {expected} for {shape}"
        )
    return (
        np.frombuffer(raw, dtype=dtype, offset=header)
        .reshape(shape)
        .astype(dtype.newbyteorder("="))
    )


def load_mnist_idx(images: str | Path, labels: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """MNIST from its IDX files (``train-images-idx3-ubyte[.gz]`` and its labels).

    Parameters
    ----------
    images : str or pathlib.Path
        the images' IDX file
    labels : str or pathlib.Path
        the labels' IDX file

    Returns
    -------
    images : ndarray of shape (n, 28, 28)
        in [0, 1]
    labels : ndarray of int64, shape (n,)
        the digits

    Raises
    ------
    LoaderError
        one line naming the file: unreadable, of the wrong shape, or counts that differ

    Examples
    --------
    >>> import struct, tempfile, pathlib
    >>> from ia_stages.data.loaders import load_mnist_idx
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> header = bytes([0, 0, 8, 3]) + struct.pack(">3I", 2, 2, 2)
    >>> _ = (d / "x").write_bytes(header + bytes([0, 255] * 4))
    >>> _ = (d / "y").write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 2) + bytes([3, 7]))
    >>> X, y = load_mnist_idx(d / "x", d / "y")
    >>> X.shape, X.max(), y.tolist()
    ((2, 2, 2), np.float64(1.0), [3, 7])
    """
    X, y = read_idx(images), read_idx(labels)
    if X.ndim != 3:
        raise LoaderError(f"{images}: expected images (n, rows, cols), got shape {X.shape}")
    if y.ndim != 1:
        raise LoaderError(f"{labels}: expected labels (n,), got shape {y.shape}")
    if len(X) != len(y):
        raise LoaderError(f"{labels}: {len(y)} labels for {len(X)} images in {images}")
    return X.astype(float) / 255.0, y.astype(np.int64)


def load_affnist_mat(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """affNIST from an official ``.mat`` file: images ``(n, 40, 40)`` in [0, 1] and labels.

    ``image`` is 1600 x n, each column a column-major 40 x 40 image; ``label_int`` holds the
    digits. Both may sit at the top level or inside the ``affNISTdata`` struct of the official
    files.

    Parameters
    ----------
    path : str or pathlib.Path
        the ``.mat`` file

    Returns
    -------
    images : ndarray of shape (n, 40, 40)
        in [0, 1]
    labels : ndarray of int64, shape (n,)
        the digits

    Raises
    ------
    LoaderError
        one line naming the file: missing, unreadable, lacking a field or of the wrong shape

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from scipy.io import savemat
    >>> from ia_stages.data.loaders import load_affnist_mat
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "tiny.mat"
    >>> savemat(f, {"image": np.zeros((1600, 3), np.uint8), "label_int": np.array([1, 2, 3])})
    >>> X, y = load_affnist_mat(f)
    >>> X.shape, y.tolist()
    ((3, 40, 40), [1, 2, 3])
    """
    from scipy.io import loadmat  # lazy: scipy.io, for affNIST's .mat files only
    from scipy.io.matlab import MatReadError

    path = Path(path)
    if not path.is_file():
        raise LoaderError(f"{path}: file does not exist")
    try:
        mat = loadmat(path, squeeze_me=True, struct_as_record=False)
    except (MatReadError, ValueError, OSError) as err:
        raise LoaderError(f"{path}: not a readable .mat file ({err})") from None
    data = mat.get("affNISTdata")
    fields = {k: getattr(data, k) for k in ("image", "label_int") if hasattr(data, k)}
    fields = fields or {k: mat[k] for k in ("image", "label_int") if k in mat}
    missing = [k for k in ("image", "label_int") if k not in fields]
    if missing:
        raise LoaderError(f"{path}: lacks {', '.join(missing)}")
    image = np.atleast_2d(np.asarray(fields["image"]))
    labels = np.atleast_1d(np.asarray(fields["label_int"])).astype(np.int64).ravel()
    if image.shape[0] != 1600:
        raise LoaderError(f"{path}: image must be 1600 x n (40 x 40 columns), got {image.shape}")
    if image.shape[1] != labels.size:
        raise LoaderError(f"{path}: {labels.size} labels for {image.shape[1]} images")
    images = image.T.reshape(-1, 40, 40).transpose(0, 2, 1)  # columns are column-major
    return images.astype(float) / 255.0, labels
