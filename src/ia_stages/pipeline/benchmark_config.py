"""The clustering benchmark's part of the configuration: its methods checked against the
method table, the group variants of its datasets, and each benchmark job's settings.

:func:`ia_stages.pipeline.config.validate_config` calls :func:`check_benchmark` and
:func:`add_group_variants` on a config whose datasets' trees are built; this module reads the
method table (:data:`ia_stages.benchmark.methods.METHODS`) so that the config's own module
does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ia_stages.benchmark.methods import METHODS
from ia_stages.pipeline.errors import ConfigError
from ia_stages.settings.tree import Settings

VARIANT_SEP = "@"
"""Separates a benchmark dataset and a group in the name of a group variant (``affnist@affine``);
reserved: no dataset of the config may use it otherwise."""


def _tree(value: Settings | dict | None) -> Settings:
    if isinstance(value, Settings):
        return value
    return Settings.from_dict(value or {})


def plain_group(s: Settings | dict | None) -> bool:
    """Whether a tree's group (or a tree dict's) is plain SE(2): no extra parameters, no
    mirror.

    Example
    -------
    >>> plain_group({"group": {"name": "affine"}}), plain_group(Settings())
    (False, True)
    """
    s = _tree(s)
    return s.group.name == "se2" and not s.mirror


def group_label(s: Settings | dict | None) -> str:
    """'se2', 'similarity', 'affine', with '+mirror' where the tree searches mirror images.

    Example
    -------
    >>> group_label({"group": {"name": "affine"}, "mirror": True})
    'affine+mirror'
    """
    s = _tree(s)
    return s.group.name + ("+mirror" if s.mirror else "")


def data_of(name: str) -> str:
    """The dataset whose images a dataset reads: itself, or a group variant's base dataset.

    Example
    -------
    >>> data_of("affnist@affine"), data_of("mnist")
    ('affnist', 'mnist')
    """
    return name.split(VARIANT_SEP, 1)[0]


def group_variants(cfg: dict) -> dict[str, str]:
    """Group variants of the benchmark datasets, name -> base dataset (``benchmark.groups``).

    For every benchmark dataset and every group of ``benchmark.groups`` (a list: for every
    dataset; a mapping: the dataset's list) other than the dataset's own,
    ``{dataset}@{group}``: the dataset's images under that group (its tree with the group's
    name replaced: bounds, mirror and refinement kept).
    """
    out = {}
    groups = cfg["benchmark"]["groups"]
    for base in cfg["benchmark"]["datasets"]:
        own = cfg["datasets"][base]["settings"]["group"]["name"]
        for g in groups.get(base, []) if isinstance(groups, dict) else groups:
            if g != own:
                out[f"{base}{VARIANT_SEP}{g}"] = base
    return out


def add_group_variants(cfg: dict) -> None:
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
        entry["settings"]["group"]["name"] = name.split(VARIANT_SEP, 1)[1]
        if name in cfg["datasets"] and cfg["datasets"][name] != entry:
            raise ConfigError(
                f"config key 'datasets.{name}': names with {VARIANT_SEP!r} are reserved for "
                f"the group variants of benchmark.groups (this one is made from {base!r})"
            )
        cfg["datasets"][name] = entry


def check_benchmark(cfg: dict, size_of: Callable[[dict, str], int]) -> None:
    """The benchmark's methods and datasets: known methods, image datasets that IA also runs
    (their kappa^max stores are reused), groups the methods can factor out, K and the graph
    baselines' k within each dataset's n (``size_of(cfg, name)``)."""
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
        s = cfg["datasets"][name]["settings"]
        for j, method in enumerate(bench["methods"]):
            if METHODS[method].transforms == "se2" and not plain_group(s):
                raise ConfigError(
                    f"config key 'benchmark.methods.{j}': method {method!r} factors out "
                    f"rotations and translations only, but dataset {name!r} has group "
                    f"{group_label(s)!r} (datasets.{name}.settings.group); drop the method, or "
                    "keep the dataset se2 and list the group in benchmark.groups"
                )
        if name not in cfg["ia"]["datasets"]:
            raise ConfigError(
                f"config key '{key}': {name!r} must also be in ia.datasets "
                "(the benchmark reuses its kappa^max stores)"
            )
        n = size_of(cfg, name)
        if not bench["graph_k"] < n:
            raise ConfigError(
                f"config key 'benchmark.graph_k': k={bench['graph_k']} must be smaller than "
                f"the {n} samples of dataset {name!r}"
            )
        K = bench["n_clusters"]
        if K is not None and K > n:
            raise ConfigError(
                f"config key 'benchmark.n_clusters': K={K} is larger than the {n} samples "
                f"of dataset {name!r}"
            )


def cluster_settings(
    cfg: dict, dataset: str, method: str, seed_index: int, backend: str
) -> dict[str, Any]:
    """Settings of one benchmark job: only what ``method`` reads (so edits rerun only it).

    The common keys, then the method's own (:attr:`ia_stages.benchmark.methods.Method.settings`
    of the dataset's tree and the config).
    """
    meth = METHODS[method]
    tree = Settings.from_dict(cfg["datasets"][dataset]["settings"])
    out = {
        "seed": cfg["seed"],
        "backend": backend,
        "dataset": dataset,
        "method": method,
        "seed_index": seed_index,
        "n_clusters": cfg["benchmark"]["n_clusters"] if meth.k_given else None,
        **meth.settings(tree, cfg, dataset),
    }
    if meth.transforms == "group":  # it reads the kappa^max stores, made under the group
        out["settings"] = {**out["settings"], **tree.subset(("group", "mirror"))}
    if data_of(dataset) != dataset:  # a group variant labels its base dataset's images
        out["data"] = data_of(dataset)
    return out
