"""The command's settings flags, generated from the settings tree's declarations.

Every setting declared with ``flag`` (:class:`ia_stages.settings.spec.Spec`) is an option of
``ia-stages cluster``, named after its path (``mask.threshold`` -> ``--mask-threshold``) or
by the name its declaration gives (``group.name`` -> ``--group``), with its type, options and
documentation; any other setting is ``--set PATH=VALUE``, and a whole YAML of settings keys
is ``--settings FILE``. :func:`settings_of_flags` turns the parsed options into the nested dict
of the tree's keys, which the tree then checks: a flag has the setting's one name and its
one check.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import yaml

from ia_stages.pipeline.errors import ConfigError
from ia_stages.settings.spec import SettingError, Spec, describe, leaves
from ia_stages.settings.tree import PRESETS, SPECS, Settings

DEFAULTS = {path: default for path, _, default in leaves(Settings)}

# old flag -> the flag that replaced it (one release with a FutureWarning)
RENAMED_FLAGS = {"--kernel-sigma": "--sigma", "--kmax": "--path"}


def flag_name(path: str, spec: Spec) -> str:
    """The option of the setting at ``path``: the name its declaration gives, else
    ``--`` and the path with dots and underscores as hyphens.

    Example
    -------
    >>> flag_name("mask.threshold", SPECS["mask.threshold"]), flag_name("group.name",
    ...     SPECS["group.name"])
    ('--mask-threshold', '--group')
    """
    if isinstance(spec.flag, str):
        return spec.flag
    return "--" + path.replace(".", "-").replace("_", "-")


def flagged() -> list[tuple[str, Spec]]:
    """The settings that are flags, in the tree's order."""
    return [(path, spec) for path, spec in SPECS.items() if spec.flag]


def _parse(spec: Spec, path: str) -> Any:
    """argparse ``type`` of a setting: the text as the YAML would read it (the tree checks
    the value)."""

    def parse(text: str) -> Any:
        if spec.kind == "clusters":
            return text if ":" in text else _number(text, int, path)
        if spec.kind in ("number", "integer"):
            if text in spec.words:
                return text
            if spec.nullable and text.lower() in ("none", "null"):
                return None
            return _number(text, int if spec.kind == "integer" else float, path)
        return text

    parse.__name__ = spec.kind  # argparse names the type in its errors
    return parse


def _number(text: str, kind: type, path: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{path} must be {what}, got {text!r}") from None


def _help(path: str, spec: Spec) -> str:
    return f"{spec.doc} ({path}: {describe(spec, DEFAULTS[path])})".replace("%", "%%")


class _Renamed(argparse.Action):
    """An old flag: stores under its new name, with a FutureWarning."""

    def __call__(self, parser, namespace, values, option_string=None):
        new = RENAMED_FLAGS[option_string]
        warnings.warn(
            f"{option_string} is deprecated and will be removed in 0.3; use {new}",
            FutureWarning,
            stacklevel=2,
        )
        setattr(namespace, self.dest, values)


def add_settings_flags(group: argparse._ActionsContainer) -> None:
    """Add every flagged setting, ``--preset``, ``--settings FILE`` and ``--set PATH=VALUE`` to
    an argument group; each option's default is None (the preset's or the file's value)."""
    group.add_argument(
        "--preset",
        choices=list(PRESETS),
        help="the named settings the others are laid over (default: images)",
    )
    group.add_argument(
        "--settings",
        metavar="FILE",
        dest="settings_file",
        help="a YAML file of settings keys (as a config's settings: block), under the flags "
        "(default: none)",
    )
    for path, spec in flagged():
        name = flag_name(path, spec)
        kwargs: dict[str, Any] = {"dest": f"setting:{path}", "default": None}
        if spec.kind == "boolean":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parse(spec, path)
            kwargs["metavar"] = path.rsplit(".", 1)[-1].upper()
            if spec.kind == "choice":
                kwargs["choices"] = list(spec.choices)
                kwargs["type"] = str
                del kwargs["metavar"]
        old = [o for o, new in RENAMED_FLAGS.items() if new == name]
        group.add_argument(name, help=_help(path, spec), **kwargs)
        for o in old:
            group.add_argument(o, dest=kwargs["dest"], action=_Renamed,
                               type=kwargs.get("type"), help=argparse.SUPPRESS)  # fmt: skip
    group.add_argument(
        "--set",
        metavar="PATH=VALUE",
        action="append",
        default=[],
        dest="set_settings",
        help="any other setting by its path, e.g. --set readout.k=8 --set "
        "path.features.n_expand=0 (repeatable; the value is read as YAML; default: none)",
    )


def settings_of_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The nested dict of tree keys the parsed options give: the ``--settings`` file, then
    every ``--set``, then every flag given (later ones win); ``preset`` when given.

    Raises
    ------
    ConfigError
        an unreadable ``--settings`` file or a ``--set`` that is not ``PATH=VALUE``.
    """
    out: dict[str, Any] = {}
    if args.settings_file:
        out = _read_settings(args.settings_file)
    for item in args.set_settings:
        path, sep, text = item.partition("=")
        if not sep or not path:
            raise ConfigError(f"--set {item!r}: expected PATH=VALUE, e.g. readout.k=8")
        _put(out, path.strip(), yaml.safe_load(text))
    for path, _ in flagged():
        value = getattr(args, f"setting:{path}")
        if value is not None:
            _put(out, path, value)
    if args.preset is not None:
        out["preset"] = args.preset
    _check_flags(args, out)
    return out


def _check_flags(args: argparse.Namespace, given: dict[str, Any]) -> None:
    """Check the settings the options give by the tree's one check, before anything runs; an
    error keeps the setting's one name and says which option gave it:
    ``n_clusters must be >= 1, got 0 (given as --n-clusters 0)``."""
    try:
        Settings.from_dict(given)
    except SettingError as err:
        text = str(err)
        for path, spec in flagged():
            value = getattr(args, f"setting:{path}")
            if value is not None and text.startswith(f"{path} "):
                raise SettingError(f"{text} (given as {flag_name(path, spec)} {value})") from None
        raise


def _read_settings(path: str) -> dict[str, Any]:
    try:
        given = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        detail = " ".join(str(err).split())
        raise ConfigError(f"--settings {path}: cannot read it ({detail})") from None
    if not isinstance(given, dict):
        raise ConfigError(f"--settings {path}: must be a mapping of settings keys")
    return given


def _put(tree: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {path}: {key!r} is a setting, not a part of the tree")
    node[keys[-1]] = value
