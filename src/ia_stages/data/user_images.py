"""The user's own images: folders of PNG/TIFF/JPEG, ``.npy``/``.npz`` arrays, Zarr stores or
xarray (NetCDF) files, multi-page TIFFs and MRC/MRCS stacks, read with the libraries made for
them (Pillow, tifffile, mrcfile, numpy, xarray).

Two steps: :func:`probe` reads only headers (number of images, their sizes) so that the
configuration is checked, and the number of samples known, before any job runs;
:func:`load_images` reads the pixels and applies the options (grayscale, ``invert``,
``downsample``, ``canvas``, ``labels``, ``max_images``). Both raise
:class:`~ia_stages.data.datasets.DatasetError` with one line naming the file.
"""

from __future__ import annotations

import csv
import hashlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ia_stages.core.background import subtract_background
from ia_stages.core.validation import constant_images, min_side, rgb_to_gray
from ia_stages.data.datasets import Dataset, DatasetError
from ia_stages.settings.images import MaskSettings
from ia_stages.settings.spec import from_dict

IMAGE_SUFFIXES = (".png", ".tif", ".tiff", ".jpg", ".jpeg")
STACK_SUFFIXES = (".npy", ".npz", ".zarr", ".nc", ".tif", ".tiff", ".mrc", ".mrcs")
LABEL_NAMES = ("label", "labels")


@dataclass
class Probe:
    """What the headers say: ``n`` images, one ``shape`` per image (H, W) and the file names
    (folders) or None (stacks); ``labels``: class name per image from subfolders or the
    stack's ``label`` variable, or None."""

    n: int
    shapes: list[tuple[int, int]]
    names: list[str]
    labels: list[str] | None


def _folder_files(root: Path) -> tuple[list[Path], list[str] | None]:
    """Image files of ``root`` and, when they sit in subfolders, the subfolder names."""
    top = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    subs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    nested = [
        (f, d.name)
        for d in subs
        for f in sorted(d.iterdir())
        if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES
    ]
    if nested and top:
        raise DatasetError(
            f"{root}: holds images both at its top level ({top[0].name}) and in class "
            "subfolders; put every image in a subfolder, or none"
        )
    if nested:
        return [f for f, _ in nested], [c for _, c in nested]
    if not top:
        raise DatasetError(f"{root}: no PNG/TIFF/JPEG images in the folder or its subfolders")
    return top, None


def _image_header(path: Path) -> tuple[int, int]:
    """(H, W) of one image file from its header; the whole file is checked by ``verify``."""
    if path.suffix.lower() in (".tif", ".tiff"):
        import tifffile  # lazy: tifffile, for TIFF inputs only (each reader ~10-40 ms to load)

        try:
            with tifffile.TiffFile(path) as tif:
                shape = tif.series[0].shape
        except (tifffile.TiffFileError, OSError, ValueError, IndexError) as err:
            raise DatasetError(f"{path}: not a readable TIFF ({err})") from None
        return _plane_shape(shape, path)
    try:
        with Image.open(path) as im:
            size = im.size
            im.verify()  # checks the whole stream (CRCs, truncation) without decoding
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as err:
        raise DatasetError(f"{path}: not a readable image ({err})") from None
    return size[1], size[0]


def _plane_shape(shape: tuple[int, ...], path: Path) -> tuple[int, int]:
    if len(shape) == 2 or (len(shape) == 3 and shape[-1] in (3, 4)):
        return int(shape[0]), int(shape[1])
    raise DatasetError(f"{path}: expected one 2-D (or RGB) image, got shape {tuple(shape)}")


def _stack_shape(shape: tuple[int, ...], path: Path) -> tuple[int, int, int]:
    """(n, H, W) of an array of images: (H, W), (n, H, W) or RGB(A) (n, H, W, 3|4)."""
    shape = tuple(int(s) for s in shape)
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) == 3 or (len(shape) == 4 and shape[-1] in (3, 4)):
        return shape[0], shape[1], shape[2]
    raise DatasetError(
        f"{path}: expected images (n, H, W) or RGB (n, H, W, 3), got a {len(shape)}-D array "
        f"of shape {shape}"
    )


def _open_xarray(path: Path):
    import xarray as xr  # lazy: xarray takes tenths of a second to load; .zarr/.nc inputs only

    try:
        if path.suffix == ".zarr" or path.is_dir():
            return xr.open_zarr(path, consolidated=None)
        return xr.open_dataset(path)
    except Exception as err:  # backends raise many kinds; all mean "unreadable"
        raise DatasetError(f"{path}: not a readable Zarr store or xarray file ({err})") from None


def _npz_arrays(path: Path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise DatasetError(f"{path}: not a readable .npz file ({err})") from None


def _npz_images_key(npz, path: Path) -> str:
    keys = list(npz.files)
    if "images" in keys:
        return "images"
    rest = [k for k in keys if k not in LABEL_NAMES]
    if len(rest) != 1:
        raise DatasetError(f"{path}: name the image array 'images' (arrays found: {keys})")
    return rest[0]


def _stack_labels(values, n: int, path: Path) -> list[str]:
    labels = np.asarray(values).ravel()
    if labels.size != n:
        raise DatasetError(f"{path}: {labels.size} labels for {n} images")
    return [str(v) for v in labels.tolist()]


def probe(path: str | Path) -> Probe:
    """Read only the headers of ``path`` (folder or stack): sizes, names, labels.

    Nothing is read beyond the headers, so that a large stack is judged (its sizes, whether
    it fits in memory) before it is loaded.

    Parameters
    ----------
    path : str or pathlib.Path
        a folder of images (class subfolders optional) or a stack file, as
        :func:`load_images` takes them

    Returns
    -------
    Probe
        ``n`` images, their ``shapes``, ``names`` (relative file names, or indices into the
        stack) and ``labels`` (the class subfolders or the stack's labels; None without)

    Raises
    ------
    DatasetError
        one line naming the path: missing, empty, unreadable or of an unknown kind

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from ia_stages.data.user_images import probe
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> np.save(d / "stack.npy", np.zeros((5, 12, 16)))
    >>> p = probe(d / "stack.npy")
    >>> p.n, p.shapes[0], p.names[:2]
    (5, (12, 16), ['0', '1'])
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder")
    suffix = path.suffix.lower()
    if path.is_dir() and suffix != ".zarr":
        files, classes = _folder_files(path)
        shapes = [_image_header(f) for f in files]
        names = [str(f.relative_to(path)) for f in files]
        return Probe(len(files), shapes, names, classes)
    labels = None
    if suffix == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            raise DatasetError(f"{path}: not a readable .npy file ({err})") from None
        shape = arr.shape
    elif suffix == ".npz":
        with _npz_arrays(path) as npz:
            key = _npz_images_key(npz, path)
            shape = npz[key].shape
            lab = next((k for k in LABEL_NAMES if k in npz.files), None)
            if lab is not None:
                labels = _stack_labels(npz[lab], _stack_shape(shape, path)[0], path)
    elif suffix in (".zarr", ".nc"):
        with _open_xarray(path) as ds:
            if "images" not in ds:
                raise DatasetError(f"{path}: no 'images' variable (found: {list(ds.data_vars)})")
            shape = ds["images"].shape
            lab = next((k for k in LABEL_NAMES if k in ds), None)
            if lab is not None:
                labels = _stack_labels(ds[lab].values, _stack_shape(shape, path)[0], path)
    elif suffix in (".tif", ".tiff"):
        import tifffile  # lazy: tifffile, for TIFF inputs only (each reader ~10-40 ms to load)

        try:
            with tifffile.TiffFile(path) as tif:
                pages = len(tif.pages)
                page = tif.pages[0].shape
        except (tifffile.TiffFileError, OSError, ValueError, IndexError) as err:
            raise DatasetError(f"{path}: not a readable TIFF ({err})") from None
        shape = (pages, *page) if pages > 1 else page
    elif suffix in (".mrc", ".mrcs"):
        import mrcfile  # lazy: mrcfile, for MRC inputs only (each reader ~10-40 ms to load)

        try:
            with mrcfile.mmap(path, mode="r", permissive=False) as mrc:
                shape = mrc.data.shape
        except (ValueError, OSError, EOFError) as err:
            raise DatasetError(f"{path}: not a readable MRC file ({err})") from None
    else:
        raise DatasetError(
            f"{path}: unknown kind of image data; give a folder of PNG/TIFF/JPEG files or a "
            f"file ending in {', '.join(STACK_SUFFIXES)}"
        )
    n, h, w = _stack_shape(shape, path)
    if n == 0:
        raise DatasetError(f"{path}: holds no images")
    return Probe(n, [(h, w)] * n, [str(i) for i in range(n)], labels)


def read_label_csv(csv_path: str | Path, names: list[str]) -> list[str]:
    """Class name of every image from a CSV ``file,label`` (a header row is allowed).

    ``file`` is an image's path relative to the folder, its file name, or, for stacks, its
    index. Every image needs a label; a row naming no image is an error.

    Parameters
    ----------
    csv_path : str or pathlib.Path
        the CSV file
    names : list of str
        the images' names, as :func:`probe` gives them

    Returns
    -------
    list of str
        the class name of every image, in the order of ``names``

    Raises
    ------
    DatasetError
        one line naming the CSV: unreadable, an image without a label, a row naming no image

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from ia_stages.data.user_images import read_label_csv
    >>> csv = pathlib.Path(tempfile.mkdtemp()) / "labels.csv"
    >>> import os
    >>> _ = csv.write_text(os.linesep.join(["file,label", "a.png,cat", "b.png,dog"]))
    >>> read_label_csv(csv, ["b.png", "a.png"])
    ['dog', 'cat']
    """
    csv_path = Path(csv_path)
    try:
        with csv_path.open(newline="") as fh:
            rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise DatasetError(f"{csv_path}: cannot read labels CSV ({err})") from None
    if rows and [c.strip().lower() for c in rows[0][:2]] in (["file", "label"], ["name", "label"]):
        rows = rows[1:]
    index: dict[str, int] = {}
    for k, name in enumerate(names):
        index.setdefault(name, k)
        index.setdefault(Path(name).name, k)
    out: list[str | None] = [None] * len(names)
    for line, row in enumerate(rows, 1):
        if len(row) < 2:
            raise DatasetError(f"{csv_path}: row {line} needs two columns, file and label")
        key = row[0].strip()
        if key not in index:
            raise DatasetError(f"{csv_path}: row {line} names {key!r}, not among the images")
        out[index[key]] = row[1].strip()
    missing = [names[k] for k, v in enumerate(out) if v is None]
    if missing:
        raise DatasetError(f"{csv_path}: no label for {len(missing)} image(s), e.g. {missing[0]!r}")
    return out  # type: ignore[return-value]


def check(
    path: str | Path,
    canvas: int | None = None,
    downsample: int = 1,
    labels: str | None = None,
    max_images: int | None = None,
    probed: Probe | None = None,
) -> int:
    """Check ``path`` and the options from headers only; returns the number of samples.

    ``probed``: :func:`probe`'s result for ``path`` when the caller has it.
    """
    p = probed or probe(path)
    if canvas is None and len(set(p.shapes)) > 1:
        sizes = sorted(set(p.shapes))
        first = next(k for k, s in enumerate(p.shapes) if s != p.shapes[0])
        raise DatasetError(
            f"{path}: images differ in size ({p.names[0]} is {p.shapes[0][0]}x"
            f"{p.shapes[0][1]}, {p.names[first]} is {p.shapes[first][0]}x{p.shapes[first][1]}; "
            f"{len(sizes)} sizes); set canvas to pad or crop them to one size"
        )
    h, w = p.shapes[0]
    if canvas is None and (h // downsample < 4 or w // downsample < 4):
        raise DatasetError(f"{path}: {h}x{w} px images are too small for downsample {downsample}")
    if labels:
        read_label_csv(labels, p.names)
    if max_images is not None and max_images > p.n:
        raise DatasetError(f"{path}: max_images={max_images} is larger than the {p.n} images")
    n = p.n if max_images is None else max_images
    side = (canvas, canvas) if canvas else (h // downsample, w // downsample)
    _check_fits_in_memory(path, n, side)
    return n


def _check_fits_in_memory(path: str | Path, n: int, side: tuple[int, int]) -> None:
    """A one-line error naming ``path`` when its ``n`` images of ``side`` pixels, as the float64
    array every stage holds, need more than the memory available here (the images are read
    whole: nothing streams them in chunks)."""
    import psutil  # lazy: psutil, for the memory check only

    need = n * side[0] * side[1] * 8
    free = psutil.virtual_memory().available
    if need > free:
        raise DatasetError(
            f"{path}: {n} images of {side[0]}x{side[1]} px need {need / 2**30:.1f} GiB as "
            f"float64, more than the {free / 2**30:.1f} GiB of memory available here; take "
            "fewer (max_images), shrink them (downsample) or split the stack"
        )


def _to_float(a: np.ndarray) -> np.ndarray:
    """Integers scaled to [0, 1] by their type's range; floats as they are."""
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(float) / float(np.iinfo(a.dtype).max)
    if np.issubdtype(a.dtype, np.bool_):
        return a.astype(float)
    return a.astype(float)


def _gray(a: np.ndarray, where: str, rgb: list[str]) -> np.ndarray:
    """(H, W, 3|4) -> (H, W) luminance (:func:`ia_stages.core.validation.rgb_to_gray`)."""
    rgb.append(where)
    return rgb_to_gray(a)


def _read_folder(files: list[Path], root: Path, rgb: list[str]) -> list[np.ndarray]:
    out = []
    for f in files:
        try:
            if f.suffix.lower() in (".tif", ".tiff"):
                # lazy: tifffile, for TIFF inputs only (each reader ~10-40 ms to load)
                import tifffile

                a = _to_float(tifffile.imread(f))
            else:
                with Image.open(f) as im:
                    if im.mode in ("RGB", "RGBA", "P", "CMYK", "YCbCr", "LA", "PA"):
                        rgb.append(str(f.relative_to(root)))
                        im = im.convert("L")
                    a = _to_float(np.asarray(im))
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as err:
            raise DatasetError(f"{f}: not a readable image ({err})") from None
        if a.ndim == 3 and a.shape[-1] in (3, 4):
            a = _gray(a, str(f.relative_to(root)), rgb)
        if a.ndim != 2:
            raise DatasetError(f"{f}: expected one 2-D image, got shape {a.shape}")
        out.append(a)
    return out


def _read_stack(path: Path) -> tuple[np.ndarray, list[str]]:
    """The pixels of a stack ``(n, H, W)`` (RGB converted) and the names of RGB sources."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        a = np.load(path, allow_pickle=False)
    elif suffix == ".npz":
        with _npz_arrays(path) as npz:
            a = npz[_npz_images_key(npz, path)]
    elif suffix in (".zarr", ".nc"):
        with _open_xarray(path) as ds:
            a = ds["images"].values
    elif suffix in (".tif", ".tiff"):
        import tifffile  # lazy: tifffile, for TIFF inputs only (each reader ~10-40 ms to load)

        a = tifffile.imread(path)
    else:
        import mrcfile  # lazy: mrcfile, for MRC inputs only (each reader ~10-40 ms to load)

        try:
            with mrcfile.open(path, mode="r", permissive=False) as mrc:
                a = np.array(mrc.data)
        except (ValueError, OSError, EOFError) as err:
            raise DatasetError(f"{path}: not a readable MRC file ({err})") from None
    n, h, w = _stack_shape(a.shape, path)
    a = _to_float(np.asarray(a)).reshape((n, h, w, *a.shape[3:]))
    rgb: list[str] = []
    if a.ndim == 4:  # every image of the stack is a colour one: one name each
        rgb = [f"{path.name}[{k}]" for k in range(n)]
        a = rgb_to_gray(a)
    return a, rgb


def _downsample(a: np.ndarray, k: int) -> np.ndarray:
    """Mean of k x k blocks (trailing rows and columns that do not fill a block are dropped)."""
    if k == 1:
        return a
    h, w = (a.shape[0] // k) * k, (a.shape[1] // k) * k
    return a[:h, :w].reshape(h // k, k, w // k, k).mean((1, 3))


def fit_canvas(a: np.ndarray, size: int) -> np.ndarray:
    """Zero-pad or centre-crop an image to a square, keeping its centre.

    Parameters
    ----------
    a : ndarray of shape (H, W)
        the image
    size : int
        the side of the output

    Returns
    -------
    ndarray of float64, shape (size, size)
        the image, padded with zeros or cropped along each axis

    Examples
    --------
    >>> import numpy as np
    >>> from ia_stages.data.user_images import fit_canvas
    >>> fit_canvas(np.ones((2, 6)), 4).astype(int).tolist()
    [[0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]]
    """
    out = np.zeros((size, size), dtype=float)
    src, dst = [], []
    for n in a.shape:
        if n >= size:  # crop
            lo = (n - size) // 2
            src.append(slice(lo, lo + size))
            dst.append(slice(0, size))
        else:  # pad
            lo = (size - n) // 2
            src.append(slice(0, n))
            dst.append(slice(lo, lo + n))
    out[dst[0], dst[1]] = a[src[0], src[1]]
    return out


def _check_content(data: np.ndarray, names: list[str], path: Path, sigma: float) -> None:
    """One-line DatasetError naming the first image that is not finite or is constant, or the
    size when it is too small for smoothing by ``sigma``."""
    bad = ~np.isfinite(data)
    if bad.any():
        k = int(np.argwhere(bad)[0][0])
        raise DatasetError(f"{path}: image {names[k]} (index {k}) holds NaN or inf")
    constant = constant_images(data)
    if constant.size:
        k = int(constant[0])
        raise DatasetError(
            f"{path}: image {names[k]} (index {k}) is constant (every pixel "
            f"{float(data[k].flat[0]):g}): it has no shape to compare; remove it"
        )
    H, W = data.shape[1:]
    if min(H, W) < min_side(sigma):
        raise DatasetError(
            f"{path}: images of {H} x {W} px are too small for sigma {sigma:g} (at least "
            f"{min_side(sigma)} px a side)"
        )


def manifest(
    path: str | Path, labels: str | Path | None = None, cache: str | Path | None = None
) -> str:
    """A digest of every input file of an ``images`` data set: its path relative to ``path``,
    size and content (BLAKE2b). It changes exactly when an image (or the labels file) is
    added, deleted, renamed or overwritten with other content.

    Parameters
    ----------
    path : str or pathlib.Path
        a folder of images (the files :func:`probe` reads: top level or class subfolders),
        a stack file, or a Zarr folder
    labels : str, pathlib.Path or None, default None
        the labels CSV, if any
    cache : str, pathlib.Path or None, default None
        a JSON file remembering each file's content digest with its size and modification
        time: a file whose size and time are unchanged is not read again (rewritten only when
        something changed). None reads every file.

    Returns
    -------
    str
        32 hex digits

    Examples
    --------
    >>> from ia_stages.data.user_images import manifest
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a.png").write_bytes(b"x")
    1
    >>> before = manifest(d); (d / "a.png").write_bytes(b"y")
    1
    >>> manifest(d) == before
    False
    """
    path = Path(path)
    if path.is_dir() and path.suffix.lower() != ".zarr":
        files, _ = _folder_files(path)
    elif path.is_dir():
        files = sorted(f for f in path.rglob("*") if f.is_file())
    else:
        files = [path]
    if labels:
        files.append(Path(labels))
    known: dict = {}
    if cache is not None and Path(cache).is_file():
        try:
            known = json.loads(Path(cache).read_text())
        except ValueError:
            known = {}
    seen: dict = {}
    digest = hashlib.blake2b(digest_size=16)
    for f in files:
        name = str(f.relative_to(path) if path.is_dir() and f.is_relative_to(path) else f)
        st = f.stat()
        entry = known.get(str(f))
        if entry is None or entry[:2] != [st.st_size, st.st_mtime_ns]:
            content = hashlib.blake2b(digest_size=16)
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    content.update(block)
            entry = [st.st_size, st.st_mtime_ns, content.hexdigest()]
        seen[str(f)] = entry
        digest.update(f"{name}\0{entry[0]}\0{entry[2]}\0".encode())
    if cache is not None and seen != known:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(cache).with_suffix(".tmp")
        tmp.write_text(json.dumps(seen))
        tmp.replace(cache)
    return digest.hexdigest()


def load_images(
    path: str | Path,
    canvas: int | None = None,
    downsample: int = 1,
    invert: bool = False,
    labels: str | None = None,
    max_images: int | None = None,
    rng: np.random.Generator | None = None,
    background: str = "none",
    sigma: float = 0.0,
    mask: MaskSettings | dict | None = None,
) -> Dataset:
    """Read the user's images as a :class:`~ia_stages.data.datasets.Dataset`.

    The formats and options are those of ``ia-stages cluster``
    (:doc:`/user-guide/your-images`). RGB images are converted to grayscale, and images
    padded or cropped to ``canvas``, with a warning.

    Parameters
    ----------
    path : str or pathlib.Path
        a folder of PNG/TIFF/JPEG (class subfolders optional), ``.npy``, ``.npz``
        (``images`` [+ ``label``]), ``.zarr``/``.nc`` (xarray: ``images`` [+ ``label``]),
        multi-page ``.tif``, ``.mrc``/``.mrcs``
    canvas : int or None, default None
        None (all images must have one size) or the side, in output pixels, every image is
        zero-padded or centre-cropped to
    downsample : int, default 1
        mean of ``downsample`` x ``downsample`` pixel blocks, before ``canvas``
    invert : bool, default False
        replace v by max - v, max the largest value of the images read (for dark objects on a
        light background); integer pixels are first scaled to [0, 1]
    labels : str or None, default None
        CSV ``file,label`` giving every image's class (overrides subfolders/stack labels)
    max_images : int or None, default None
        keep this many images, a subset drawn with ``rng`` (in file order)
    rng : numpy.random.Generator or None, default None
        draws the ``max_images`` subset; None: ``numpy.random.default_rng(0)``
    background : {'none', 'median', 'mask'}, default 'none'
        'median' subtracts each image's border median (last); 'mask' then also sets every
        pixel away from the object to 0 (noisy images;
        :func:`ia_stages.core.background.subtract_background`)
    sigma : float, default 0.0
        the smoothing kappa^max will apply: images too small for it are refused
    mask : MaskSettings, dict or None, default None
        the :class:`~ia_stages.settings.MaskSettings` of 'mask' (or a dict of its keys; None:
        the defaults); an image without a pixel above the noise is kept whole, with a warning

    Returns
    -------
    Dataset
        ``data`` ``(n, H, W)`` float64, ``label`` ``(n,)`` int or None, ``sample_names``
        (file names, or indices into the stack) and ``class_names``

    Raises
    ------
    DatasetError
        one line naming the file (and its index in the data set): unreadable, NaN or inf,
        constant (no shape to compare), too small for ``sigma``.

    Examples
    --------
    A folder of PNGs in class subfolders:

    >>> import tempfile, pathlib
    >>> import numpy as np
    >>> from PIL import Image
    >>> from ia_stages.data.user_images import load_images
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for cls, col in (("bars", 5), ("dots", 2)):
    ...     (root / cls).mkdir()
    ...     for k in range(2):
    ...         img = np.zeros((16, 16), np.uint8); img[4:12, col : col + 3 + k] = 255
    ...         Image.fromarray(img).save(root / cls / f"{k}.png")
    >>> ds = load_images(root)
    >>> ds.data.shape, ds.class_names, ds.label.tolist()
    ((4, 16, 16), ['bars', 'dots'], [0, 0, 1, 1])
    >>> ds.sample_names[0]
    'bars/0.png'
    """
    path = Path(path)
    mask_settings = mask if isinstance(mask, MaskSettings) else from_dict(MaskSettings, mask)
    rng = rng or np.random.default_rng(0)
    p = probe(path)
    n_out = check(path, canvas, downsample, labels, max_images, p)
    keep = np.arange(p.n)
    if max_images is not None:
        keep = np.sort(rng.choice(p.n, n_out, replace=False))
    rgb: list[str] = []
    if path.is_dir() and path.suffix.lower() != ".zarr":
        planes = _read_folder([path / p.names[k] for k in keep], path, rgb)
    else:
        stack, rgb = _read_stack(path)
        planes = list(stack[keep])
        rgb = [rgb[k] for k in keep] if rgb else []
    if rgb:
        warnings.warn(
            f"{path}: {len(rgb)} RGB image(s) converted to grayscale (e.g. {rgb[0]})",
            UserWarning,
            stacklevel=2,
        )
    if invert:
        top = max(float(a.max()) for a in planes)
        planes = [top - a for a in planes]
    planes = [_downsample(a, downsample) for a in planes]
    if canvas is not None:
        changed = sum(a.shape != (canvas, canvas) for a in planes)
        if changed:
            warnings.warn(
                f"{path}: {changed} image(s) padded or centre-cropped to {canvas} x {canvas} px",
                UserWarning,
                stacklevel=2,
            )
        planes = [fit_canvas(a, canvas) for a in planes]
    data = np.stack(planes)
    names = [p.names[k] for k in keep]
    _check_content(data, names, path, sigma)
    data = subtract_background(data, background, mask_settings, names)
    classes = read_label_csv(labels, p.names) if labels else p.labels
    if classes is None:
        label, class_names = None, []
    else:
        class_names, label = np.unique(np.asarray(classes)[keep], return_inverse=True)
        class_names = [str(c) for c in class_names]
        label = label.astype(np.int64)
    return Dataset(
        data,
        label,
        None,
        class_names,
        source=f"images from {path.name}",
        sample_names=names,
    )
