"""The settings tree: every setting of one Invariant Attention run, under one name each.

:class:`Settings` is the only description of a run. The estimator's parameters, the YAML's
``settings:`` blocks, the command's flags, the stores' provenance and every error message use
its names: the top-level scalars (``beta``, ``sigma``, ``n_clusters``, ...) by their own
name, the parts' fields by their path (``readout.k``, ``path.features.n_candidates``). It is
frozen, checked when it is built (:mod:`ia_stages.settings.spec`), built once per fit or job
and passed down as the tree.

Example
-------
>>> s = Settings.from_dict({"sigma": 2, "readout": {"k": 5}})
>>> s.sigma, s.readout.k, s.attention.kind
(2.0, 5, 'knn')
>>> Settings.from_dict({"readout": {"kk": 5}})
Traceback (most recent call last):
...
ia_stages.settings.spec.SettingError: readout has no key 'kk'; did you mean 'k'?
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ia_stages.settings.attention import AttentionSettings, MeanSettings
from ia_stages.settings.group import GroupSettings
from ia_stages.settings.images import BACKGROUNDS, NORMALIZATIONS, MaskSettings, NoiseSettings
from ia_stages.settings.path import PathSettings
from ia_stages.settings.readout import ReadoutSettings, StopSettings
from ia_stages.settings.search import EXACT_SEARCH, SearchSettings
from ia_stages.settings.spec import (
    SettingError,
    boolean,
    check_value,
    choice,
    clusters,
    coerce_part,
    from_dict,
    integer,
    is_unset,
    leaves,
    number,
    part,
    settings_part,
    spec_of,
    to_dict,
)

INITS = ("kmax", "identity")
BACKENDS = ("auto", "numpy", "cupy")


@settings_part("")
class Settings:
    """Every setting of one Invariant Attention run (:func:`ia_stages.ia.loop.run_ia`).

    The defaults are the ``'images'`` preset (:data:`ia_stages.settings.PRESETS`): kNN
    attention, one iteration, the kNN-graph read-out. Build a tree from a nested dict with
    :meth:`from_dict`, write it with :meth:`to_dict`.
    """

    n_clusters: int | tuple[int, int] | None = clusters(
        None,
        "the number of clusters K: an int is honoured exactly, a range (lo, hi) is searched, "
        "None finds K from the data",
        flag=True,
    )
    beta: float = number(
        20.0, "RBF bandwidth of kappa^max on unit-norm images", low=0.0, low_open=True, flag=True
    )
    sigma: float | str = number(
        1.0,
        "Gaussian smoothing (px) inside kappa^max, or 'auto': chosen from the images' noise "
        "(noise settings; clean images get noise.min_sigma)",
        low=0.0, words=("auto",), flag=True,
    )  # fmt: skip
    normalization: str = choice(
        "unit", NORMALIZATIONS, "'unit' scales every image to unit norm; 'none' keeps it"
    )
    group: GroupSettings = part(
        GroupSettings,
        "the transformations factored out: se2, similarity or affine (``group: affine`` is "
        "short for ``group: {name: affine}``), with the bounds of the extra parameters",
    )
    mirror: bool = boolean(False, "the group also holds mirror images", flag=True)
    background: str = choice(
        "none",
        BACKGROUNDS,
        "'median' subtracts each image's border median (a grey background otherwise dominates "
        "kappa^max); 'mask' (noisy images) also sets every pixel away from the object to 0",
        flag=True,
    )
    iterations: int = integer(
        1,
        "most IA iterations (0 reads clusters off the input's kappa^max); the stopping rule "
        "may keep an earlier one",
        low=0, high=50, flag=True,
    )  # fmt: skip
    init: str = choice(
        "kmax",
        INITS,
        "'kmax' starts each invariant mean at the kappa^max alignments; 'identity' as in the paper",
    )
    backend: str = choice(
        "auto",
        BACKENDS,
        "array backend: 'numpy' (CPU), 'cupy' (a CUDA GPU; an error without one) or 'auto'",
        flag=True, runtime=True,
    )  # fmt: skip
    attention: AttentionSettings = part(AttentionSettings, "the attention weights W")
    mean: MeanSettings = part(MeanSettings, "Algorithm 1: the columns' means, class averages")
    readout: ReadoutSettings = part(ReadoutSettings, "how clusters are read off kappa^max")
    stop: StopSettings = part(StopSettings, "which iteration's read-out to keep")
    search: SearchSettings = part(SearchSettings, "the kappa^max search")
    path: PathSettings = part(PathSettings, "every pair (dense) or the kNN path")
    noise: NoiseSettings = part(NoiseSettings, "how sigma 'auto' reads the images' noise")
    mask: MaskSettings = part(MaskSettings, "how background 'mask' finds each image's support")

    def relations(self) -> None:
        """Checks across parts that do not depend on n (those that do: :func:`~ia_stages.
        settings.sizing.sized`)."""
        if self.readout.kind == "spectral" and self.n_clusters is None:
            raise SettingError("readout.kind 'spectral' needs n_clusters")
        if self.path.mode == "candidates":
            check_knn_path(self, "path.mode 'candidates'")

    @classmethod
    def from_dict(
        cls, given: dict | Settings | None, base: Settings | None = None, partial: bool = False
    ) -> Settings:
        """The tree with the nested keys of ``given`` laid over ``base`` (default: the
        defaults); ``preset: NAME`` in ``given`` starts from that preset instead
        (:data:`ia_stages.settings.PRESETS`). See :func:`ia_stages.settings.spec.from_dict`.

        Example
        -------
        >>> Settings.from_dict({"preset": "paper", "iterations": 1}).attention.kind
        'dense'
        """
        if isinstance(given, dict) and "preset" in given:
            given = dict(given)
            base = preset(given.pop("preset"))
        return from_dict(cls, given, base, partial)

    def to_dict(self) -> dict[str, Any]:
        """The nested plain dict (JSON-able): the YAML's ``settings:`` block and the stores'
        provenance.

        Example
        -------
        >>> Settings().to_dict()["path"]["features"]["n_expand"]
        32
        """
        return to_dict(self)

    def subset(self, paths: tuple[str, ...]) -> dict[str, Any]:
        """The nested dict of only the settings at ``paths`` (``'beta'``, a part ``'search'``
        or a part's field ``'attention.k'``): what one pipeline stage reads, hence its
        settings hash. :meth:`from_dict` with ``partial=True`` builds the job's tree from it,
        in which every other setting is :class:`~ia_stages.settings.spec.Unset`.

        Example
        -------
        >>> Settings().subset(("beta", "attention.k"))
        {'beta': 20.0, 'attention': {'k': None}}
        """
        full = self.to_dict()
        out: dict[str, Any] = {}
        for path in paths:
            src, dst = full, out
            keys = path.split(".")
            for key in keys[:-1]:
                if key not in src:
                    raise SettingError(f"no settings part {key!r} (in {path!r})")
                src = src[key]
                dst = dst.setdefault(key, {})
            if keys[-1] not in src:
                raise SettingError(f"no setting {path!r}")
            dst[keys[-1]] = src[keys[-1]]
        return out

    def holds(self, path: str) -> bool:
        """Whether this (possibly partial) tree holds the setting at ``path``."""
        value: Any = self
        for key in path.split("."):
            value = getattr(value, key)
            if is_unset(value):
                return False
        return True


def check_knn_path(s: Settings, why: str) -> None:
    """What the kNN path needs of the other settings, one line naming them otherwise."""
    head = f"{why}: the kNN path"
    if s.attention.kind != "knn":
        raise SettingError(
            f"{head} needs attention.kind 'knn' (dense W weighs all pairs); set path.mode "
            "'dense' to compute every pair"
        )
    if s.readout.kind != "graph" or s.readout.community == "hdbscan":
        raise SettingError(
            f"{head} needs the graph read-out (readout.kind 'graph', readout.community not "
            "'hdbscan'); set path.mode 'dense' to compute every pair"
        )


# The presets: the whole IA, named. 'images' (the default) is what works on real images: each
# column attends to its mutual nearest under kappa^max and takes their weighted mean at their
# kappa^max alignments (no gradient steps); clusters are read off the kNN kappa^max graph of
# one iteration; with more iterations the stability rule keeps one. 'paper' is the paper's
# dense IA with the average-linkage read-out. 'exact' is 'images' with the search that reaches
# the global optimum on (nearly) every pair, far ones included.
PRESETS: dict[str, Settings] = {
    "images": Settings(),
    "paper": Settings(
        beta=30.0,
        iterations=2,
        sigma=2.0,
        attention=AttentionSettings(kind="dense", k=None, symmetry="none", mean_steps=None),
        readout=ReadoutSettings(kind="linkage", threshold=0.3),
        stop=StopSettings(rule="none"),
        path=PathSettings(mode="dense"),
    ),
    "exact": Settings(search=EXACT_SEARCH),
}
DEFAULT_PRESET = "images"


def preset(name: str | None) -> Settings:
    """The preset ``name`` (None: :data:`DEFAULT_PRESET`), or a one-line error naming it.

    Example
    -------
    >>> preset("paper").readout.kind
    'linkage'
    """
    name = DEFAULT_PRESET if name is None else name
    if name not in PRESETS:
        raise SettingError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
    return PRESETS[name]


def check_setting(path: str, value: Any) -> Any:
    """``value`` checked as the setting at ``path`` of the tree is declared, for the library
    functions that take one setting as an argument (:func:`ia_stages.kmax.kappa_max`'s
    ``beta``): one declaration, wherever it is checked.

    Example
    -------
    >>> check_setting("normalization", "l2")
    Traceback (most recent call last):
    ...
    ia_stages.settings.spec.SettingError: normalization must be one of 'unit', 'none', got 'l2'
    """
    return check_value(SPECS[path], value, path)


SPECS: dict[str, Any] = {path: spec for path, spec, _ in leaves(Settings)}
"""Every setting of the tree by its full path (``readout.k``): its :class:`~ia_stages.settings.
spec.Spec`."""


def settings_of(
    preset_name: str | None = None, config: Settings | dict | None = None, **values: Any
) -> Settings:
    """The tree of a run as the estimator and :func:`ia_stages.invariant_attention` build it:
    the preset (``preset_name``, else the ``preset`` key of a dict ``config``, else the
    default), then ``config`` (a tree, which replaces the preset whole, or a dict of its keys),
    then every top-level setting of ``values`` that is not None; checked once, as a whole.

    Example
    -------
    >>> settings_of("paper", {"readout": {"threshold": 0.5}}, sigma=1.0).readout.threshold
    0.5
    """
    if config is not None and not isinstance(config, Settings | dict):
        raise SettingError(f"config must be a Settings or a dict, got {type(config).__name__}")
    if isinstance(config, Settings):
        if preset_name is not None:
            raise SettingError("preset: give a preset or a settings tree as config, not both")
        base, given = config, {}
    else:
        given = dict(config or {})
        name = given.pop("preset", None)
        base = preset(name if preset_name is None else preset_name)
    for key, value in values.items():
        if value is None:
            continue
        spec = SPECS.get(key) or spec_of(next(f for f in fields(Settings) if f.name == key))
        if spec.kind == "part":  # a part's keys are laid over the config's
            value = coerce_part(spec.part, value)
            if isinstance(value, dict) and isinstance(given.get(key), dict):
                value = {**given[key], **value}
        given[key] = value
    return from_dict(Settings, given, base)
