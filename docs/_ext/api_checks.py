"""The public API's docstrings, checked at build time: every public name has a numpydoc
docstring, every parameter is documented with a type (and its default where it has one), and
every public function and class has an Examples section. A failure is a build warning (an
error under ``-W``) located at the source file and line of the object.

The public API is ``api_public`` in ``conf.py``: module names (their ``__all__``) and
``module:name`` entries. Classes are checked with their public methods and properties.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

from numpydoc.docscrape import NumpyDocString
from numpydoc.validate import validate
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

# numpydoc's checks: no docstring, unknown or misplaced sections, parameters missing, unknown
# or without a type, no Examples (functions and classes)
CHECKS = ("GL08", "GL06", "GL07", "PR01", "PR02", "PR04", "EX01")
METHOD_CHECKS = ("GL08", "GL06", "GL07", "PR01", "PR02", "PR04")


def public_objects(spec: list[str]) -> list[tuple[str, Any]]:
    """``(qualified name, object)`` of every entry of ``spec``: a module's ``__all__`` names,
    or ``module:name``. Module-level data (tuples, instances) is skipped: it has no
    docstring of its own."""
    out = []
    for entry in spec:
        module_name, _, names = entry.partition(":")
        module = importlib.import_module(module_name)
        listed = names.split(",") if names else list(getattr(module, "__all__", []))
        for name in listed:
            name = name.strip()
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                home = f"{obj.__module__}.{obj.__qualname__}"
                out.append((home, obj))
    seen, unique = set(), []
    for name, obj in out:
        if name not in seen:
            seen.add(name)
            unique.append((name, obj))
    return unique


def members(cls: type) -> list[str]:
    """The public methods and properties a class defines itself (not inherited ones)."""
    names = []
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property | staticmethod | classmethod) or inspect.isfunction(value):
            names.append(name)
    return names


def _location(obj: Any) -> str:
    target = obj.fget if isinstance(obj, property) else obj
    target = getattr(target, "__func__", target)
    try:
        path = inspect.getsourcefile(target)
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return getattr(target, "__module__", "?")
    return f"{path}:{line}"


def _defaults_said(name: str, obj: Any) -> list[str]:
    """Parameters with a default whose type line does not give it (numpydoc's ``, default
    X`` or ``, optional``)."""
    target = obj
    if inspect.isclass(obj):
        target = obj.__init__
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    doc = NumpyDocString(inspect.getdoc(obj) or "")
    types = {}
    for param in doc["Parameters"]:
        for each in param.name.split(","):
            types[each.strip().lstrip("*")] = param.type
    missing = []
    for param in signature.parameters.values():
        if param.name in ("self", "cls") or param.default is inspect.Parameter.empty:
            continue
        text = types.get(param.name)
        if text is not None and "default" not in text and "optional" not in text:
            missing.append(param.name)
    return missing


def _dataclass_fields(obj: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()


def check_object(name: str, obj: Any, checks: tuple[str, ...]) -> list[str]:
    """The problems of one object's docstring, each ``CODE: message``."""
    report = validate(name)
    problems = [f"{code}: {message}" for code, message in report["errors"] if code in checks]
    if dataclasses.is_dataclass(obj):
        # a dataclass's fields may be documented as Attributes instead of Parameters
        doc = NumpyDocString(inspect.getdoc(obj) or "")
        documented = {p.name for p in doc["Parameters"]} | {p.name for p in doc["Attributes"]}
        fields = _dataclass_fields(obj)
        problems = [p for p in problems if not p.startswith("PR01")]
        missing = sorted(fields - documented)
        if missing:
            problems.append(f"PR01: fields not documented: {', '.join(missing)}")
    if "GL08" not in {p[:4] for p in problems}:
        undeclared = _defaults_said(name, obj)
        if undeclared:
            problems.append(
                "PR-DEFAULT: the type line does not give the default of: " + ", ".join(undeclared)
            )
    return problems


def run_checks(spec: list[str]) -> list[tuple[str, str, list[str]]]:
    """``(name, location, problems)`` of every public object and method with a problem."""
    found = []
    for name, obj in public_objects(spec):
        problems = check_object(name, obj, CHECKS)
        if problems:
            found.append((name, _location(obj), problems))
        if inspect.isclass(obj):
            for member in members(obj):
                value = vars(obj)[member]
                problems = check_object(f"{name}.{member}", value, METHOD_CHECKS)
                if problems:
                    found.append((f"{name}.{member}", _location(value), problems))
    return found


def _check(app: Sphinx) -> None:
    for name, location, problems in run_checks(app.config.api_public):
        for problem in problems:
            logger.warning("%s: %s", name, problem, location=location, type="api", subtype="doc")


def setup(app: Sphinx) -> dict:
    app.add_config_value("api_public", [], "env")
    app.connect("builder-inited", _check)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
