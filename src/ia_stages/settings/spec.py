"""How a setting is declared, checked, read and written: the one place settings are validated.

Every field of a settings dataclass is declared with one of :func:`number`, :func:`integer`,
:func:`boolean`, :func:`choice`, :func:`numbers` or :func:`part`. The declaration holds the
field's default, its one-line documentation and its range or options (a :class:`Spec`), and
everything else is read off it:

- the check (:func:`check_fields`, run by each part's ``__post_init__``): a one-line
  :class:`SettingError` naming the setting by its full path (``readout.k``);
- the nested dict of the YAML and the stores' provenance (:func:`to_dict`,
  :func:`from_dict`);
- the JSON schema of the pipeline's configuration (:func:`json_schema`), the configuration
  reference of the docs, the command's flags and the estimator's ``_parameter_constraints``.

Example
-------
>>> @settings_part("demo")
... class Demo:
...     beta: float = number(2.0, "bandwidth", low=0.0, low_open=True)
>>> Demo(beta=0.0)
Traceback (most recent call last):
...
ia_stages.settings.spec.SettingError: demo.beta must be > 0, got 0.0
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import numbers as _numbers
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import Any


class SettingError(ValueError):
    """A setting is unknown, out of range or unusable here; the message names its full path."""


@dataclass(frozen=True)
class Spec:
    """The declaration of one setting (the metadata of its dataclass field).

    kind : 'number', 'integer', 'boolean', 'choice', 'numbers' (a tuple of numbers), 'part'
        (a nested settings dataclass) or 'clusters' (None, a count or a range ``(lo, hi)``)
    doc : one line for the docs, the schema's description and the command's help
    choices : the options of a 'choice'
    low, high : bounds of a number (of every item of 'numbers'); inclusive unless ``low_open``
        / ``high_open``
    nullable : None is allowed (and means what ``doc`` says)
    words : strings a number may also be (``('auto',)``)
    length : 'numbers': the exact number of items (None: at least one)
    part : 'part': the dataclass
    flag : the setting is one of ``ia-stages cluster``'s flags: True (named after its path,
        ``--mask-threshold``) or the flag's name (``--group``)
    runtime : the setting changes how a run goes (threads, devices), never its results
    """

    kind: str
    doc: str
    choices: tuple = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    words: tuple[str, ...] = ()
    length: int | None = None
    part: type | None = None
    flag: bool | str = False
    runtime: bool = False


def _field(default: Any, spec: Spec) -> Any:
    return field(default=default, metadata={"spec": spec})


def number(
    default: float | None,
    doc: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    nullable: bool = False,
    words: tuple[str, ...] = (),
    flag: bool | str = False,
) -> Any:
    """A real-valued setting (stored as a float)."""
    spec = Spec("number", doc, low=low, high=high, low_open=low_open, high_open=high_open,
                nullable=nullable, words=words, flag=flag)  # fmt: skip
    return _field(default, spec)


def integer(
    default: int | None,
    doc: str,
    *,
    low: int | None = None,
    high: int | None = None,
    nullable: bool = False,
    flag: bool | str = False,
    runtime: bool = False,
) -> Any:
    """An integer setting."""
    spec = Spec("integer", doc, low=low, high=high, nullable=nullable, flag=flag, runtime=runtime)
    return _field(default, spec)


def boolean(default: bool, doc: str, *, flag: bool | str = False) -> Any:
    """A true/false setting."""
    return _field(default, Spec("boolean", doc, flag=flag))


def choice(
    default: str,
    options: tuple[str, ...],
    doc: str,
    *,
    flag: bool | str = False,
    runtime: bool = False,
) -> Any:
    """A setting that is one of ``options``."""
    return _field(default, Spec("choice", doc, choices=tuple(options), flag=flag, runtime=runtime))


def numbers(
    default: tuple[float, ...],
    doc: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    length: int | None = None,
) -> Any:
    """A tuple of real numbers (a list in the YAML)."""
    spec = Spec("numbers", doc, low=low, high=high, low_open=low_open, length=length)
    return _field(tuple(default), spec)


def clusters(default: None, doc: str, *, flag: bool | str = False) -> Any:
    """The number of clusters: None (found from the data), a count K, or a range ``(lo, hi)``."""
    return _field(default, Spec("clusters", doc, low=1, flag=flag))


def part(cls: type, doc: str) -> Any:
    """A nested settings dataclass (its own fields declared in it)."""
    return field(default_factory=cls, metadata={"spec": Spec("part", doc, part=cls)})


def spec_of(f: dataclasses.Field) -> Spec | None:
    """The :class:`Spec` a field was declared with (None for a field without one)."""
    return f.metadata.get("spec")


# --- a tree that holds only some settings (a pipeline job's) ---------------------------------


class Unset:
    """The value of a setting that a job's partial tree does not hold (:func:`from_dict` with
    ``partial=True``): reading it is an error naming it, so that a stage cannot depend on a
    setting outside the part of the tree that its settings hash covers.

    Example
    -------
    >>> u = Unset("readout.threshold")
    >>> float(u)
    Traceback (most recent call last):
    ...
    ia_stages.settings.spec.SettingError: this job's settings do not hold readout.threshold
    """

    __slots__ = ("path",)

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "path", path)

    def _refuse(self, *args: Any) -> Any:
        raise SettingError(f"this job's settings do not hold {self.path}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise SettingError(f"this job's settings do not hold {self.path}.{name}")

    def __repr__(self) -> str:
        return f"Unset({self.path!r})"

    __float__ = __int__ = __index__ = __bool__ = __len__ = __iter__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __lt__ = __le__ = __gt__ = __ge__ = __neg__ = _refuse


def is_unset(value: Any) -> bool:
    """Whether ``value`` is a setting a partial tree does not hold."""
    return isinstance(value, Unset)


# --- the check ----------------------------------------------------------------------------


def _bounds(spec: Spec) -> str:
    parts = []
    if spec.low is not None:
        parts.append(f"{'>' if spec.low_open else '>='} {spec.low:g}")
    if spec.high is not None:
        parts.append(f"{'<' if spec.high_open else '<='} {spec.high:g}")
    return " and ".join(parts)


def _real(value: Any, spec: Spec, path: str, integer: bool) -> Any:
    kind = _numbers.Integral if integer else _numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        if spec.words:
            what += " or " + " or ".join(repr(w) for w in spec.words)
        if spec.nullable:
            what += " or null"
        raise SettingError(f"{path} must be {what}, got {value!r}")
    if not math.isfinite(value):
        raise SettingError(f"{path} must be finite, got {value!r}")
    low_bad = spec.low is not None and (value <= spec.low if spec.low_open else value < spec.low)
    high_bad = spec.high is not None and (
        value >= spec.high if spec.high_open else value > spec.high
    )
    if low_bad or high_bad:
        raise SettingError(f"{path} must be {_bounds(spec)}, got {value!r}")
    return int(value) if integer else float(value)


def check_value(spec: Spec, value: Any, path: str) -> Any:
    """``value`` checked against ``spec`` and normalised (floats for numbers, tuples for lists),
    or a one-line :class:`SettingError` naming ``path``.

    Example
    -------
    >>> check_value(Spec("number", "", low=0.0), 2, "beta")
    2.0
    >>> check_value(Spec("choice", "", choices=("a", "b")), "c", "x")
    Traceback (most recent call last):
    ...
    ia_stages.settings.spec.SettingError: x must be one of 'a', 'b', got 'c'
    """
    if is_unset(value):
        value._refuse()
    if value is None:
        if spec.nullable or spec.kind == "clusters":
            return None
        raise SettingError(f"{path} must be set (null is not allowed)")
    if spec.kind in ("number", "integer"):
        if isinstance(value, str) and value in spec.words:
            return value
        return _real(value, spec, path, spec.kind == "integer")
    if spec.kind == "boolean":
        if not isinstance(value, bool):
            raise SettingError(f"{path} must be true or false, got {value!r}")
        return value
    if spec.kind == "choice":
        if not isinstance(value, str) or value not in spec.choices:
            options = ", ".join(repr(c) for c in spec.choices)
            raise SettingError(f"{path} must be one of {options}, got {value!r}")
        return value
    if spec.kind == "numbers":
        if isinstance(value, str) or not hasattr(value, "__iter__"):
            raise SettingError(f"{path} must be a list of numbers, got {value!r}")
        items = tuple(value)
        if spec.length is not None and len(items) != spec.length:
            raise SettingError(f"{path} must hold {spec.length} numbers, got {list(items)}")
        if not items:
            raise SettingError(f"{path} must hold at least one number")
        item = replace(spec, kind="number", nullable=False, words=())
        return tuple(_real(v, item, path, False) for v in items)
    if spec.kind == "clusters":
        return clusters_value(value, path)
    if spec.kind == "part":
        if not isinstance(value, spec.part):
            raise SettingError(f"{path} must be a {spec.part.__name__}, got {type(value).__name__}")
        return value
    raise SettingError(f"{path}: unknown kind of setting {spec.kind!r}")


def clusters_value(value: Any, path: str) -> int | tuple[int, int] | None:
    """An ``n_clusters`` value checked and normalised: None, K >= 1, or a range (lo, hi) with
    1 <= lo <= hi, given as a pair or as the text ``"LO:HI"`` (a range lo:lo is K = lo).
    A bad value raises one SettingError line naming ``path``.

    Example
    -------
    >>> clusters_value("2:5", "n_clusters"), clusters_value([3, 3], "n_clusters")
    ((2, 5), 3)
    """
    one = Spec("integer", "", low=1)
    if isinstance(value, str) and ":" in value:
        lo, _, hi = value.partition(":")
        try:
            value = (int(lo), int(hi))
        except ValueError:
            raise SettingError(
                f"{path} must be an integer K or a range LO:HI, got {value!r}"
            ) from None
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise SettingError(f"{path} must be an integer K or a range (lo, hi), got {value!r}")
        lo, hi = (_real(v, one, path, True) for v in value)
        if lo > hi:
            raise SettingError(f"{path} must be a range (lo, hi) with lo <= hi, got {value!r}")
        return (lo, hi) if lo < hi else lo
    return _real(value, one, path, True)


def check_fields(obj: Any) -> None:
    """Check and normalise every declared field of the settings dataclass ``obj`` in place
    (its ``__post_init__``), then its ``relations()`` (checks across fields), if any.

    Raises
    ------
    SettingError
        naming the field by its full path (the class's ``PATH`` and the field's name).
    """
    prefix = getattr(type(obj), "PATH", "")
    for f in fields(obj):
        spec = spec_of(f)
        value = getattr(obj, f.name)
        if spec is None or is_unset(value):
            continue
        checked = check_value(spec, value, _join(prefix, f.name))
        if checked is not value:
            object.__setattr__(obj, f.name, checked)
    relations = getattr(obj, "relations", None)
    if relations is not None and not _has_unset(obj):
        relations()


def _has_unset(obj: Any) -> bool:
    return any(is_unset(getattr(obj, f.name)) for f in fields(obj))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


EXAMPLES = "\n\nExamples\n--------\n"  # a docstring's Examples section stays last


def settings_part(path: str) -> Any:
    """Class decorator that makes a frozen settings dataclass living at ``path`` in the tree
    (messages name its fields from there): it checks its fields when built (and on every
    ``replace``), and its docstring gets an ``Attributes`` section listing each field's type,
    default and doc (before an Examples section)."""

    def wrap(cls: type) -> type:
        cls.PATH = path
        own = cls.__dict__.get("__post_init__")

        def __post_init__(self: Any) -> None:
            check_fields(self)
            if own is not None:
                own(self)

        cls.__post_init__ = __post_init__
        cls = dataclass(frozen=True)(cls)
        head, sep, examples = inspect.cleandoc(cls.__doc__ or "").partition(EXAMPLES)
        tail = sep + examples if sep else ""
        cls.__doc__ = head.rstrip() + "\n\n" + _attributes_doc(cls) + tail
        return cls

    return wrap


def describe(spec: Spec, default: Any) -> str:
    """The type, range and default of a setting in words (its docs, help and reference).

    Example
    -------
    >>> describe(Spec("number", "", low=0.0, low_open=True), 20.0)
    'number > 0, default 20'
    """
    if spec.kind == "choice":
        text = " | ".join(repr(c) for c in spec.choices)
    elif spec.kind == "part":
        return f"{spec.part.__name__}"
    elif spec.kind == "clusters":
        text = "int K >= 1, a range (lo, hi), or None"
    else:
        text = {"number": "number", "integer": "int", "boolean": "bool", "numbers": "numbers"}[
            spec.kind
        ]
        bounds = _bounds(spec)
        if bounds:
            text += " " + bounds
        if spec.words:
            text += " or " + " or ".join(repr(w) for w in spec.words)
        if spec.nullable:
            text += " or None"
    return f"{text}, default {_show(default)}"


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_show(v) for v in value) + ")"
    return repr(value)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _attributes_doc(cls: type) -> str:
    lines = ["Attributes", "----------"]
    for f in fields(cls):
        spec = spec_of(f)
        if spec is None:
            continue
        lines.append(f"{f.name} : {describe(spec, _default(f))}")
        lines.append("    " + spec.doc.replace("|", "\\|"))  # not an rst substitution
    return "\n".join(lines)


# --- dicts ------------------------------------------------------------------------------


def to_dict(obj: Any) -> dict[str, Any]:
    """The settings dataclass ``obj`` as a nested plain dict (lists for tuples), the YAML's and
    the stores' form; settings a partial tree does not hold are left out.

    Example
    -------
    >>> from ia_stages.settings import Settings
    >>> to_dict(Settings())["readout"]["k"] is None
    True
    """
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_unset(value):
            continue
        if is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def known_keys(cls: type) -> list[str]:
    """The declared keys of a settings dataclass."""
    return [f.name for f in fields(cls) if spec_of(f) is not None]


def unknown_key(path: str, key: str, known: list[str]) -> SettingError:
    """The error of a key no settings dataclass declares, with the closest known key."""
    where = f"{path} has" if path else "the settings have"
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(known)})"
    return SettingError(f"{where} no key {key!r}{hint}")


def from_dict(cls: type, given: Any, base: Any = None, partial: bool = False) -> Any:
    """The settings dataclass ``cls`` with the keys of ``given`` laid over ``base``.

    Parameters
    ----------
    cls : type
        A settings dataclass (:func:`settings_part`).
    given : dict, instance of ``cls`` or None
        Nested keys (dicts for the parts); an instance replaces ``base`` whole; None keeps it.
    base : instance of ``cls`` or None, default None
        What the keys are laid over (None: the defaults).
    partial : bool, default False
        Every key ``given`` does not hold is :class:`Unset` instead of ``base``'s (a job's
        tree, :meth:`ia_stages.settings.Settings.subset`).

    Returns
    -------
    An instance of ``cls``, checked.

    Raises
    ------
    SettingError
        an unknown key (with the closest known one), or a value out of range, named by its
        full path.
    """
    path = getattr(cls, "PATH", "")
    if given is None:
        given = {}
    if isinstance(given, cls):
        return given
    given = coerce_part(cls, given)
    if not isinstance(given, dict):
        raise SettingError(f"{path or 'settings'} must be a mapping, got {type(given).__name__}")
    known = known_keys(cls)
    for key in given:
        if key not in known:
            raise unknown_key(path, key, known)
    values = {}
    for f in fields(cls):
        spec = spec_of(f)
        if spec is None:
            continue
        sub_base = None if base is None else getattr(base, f.name)
        if f.name not in given:
            if partial:
                values[f.name] = Unset(_join(path, f.name))
            elif sub_base is not None or base is not None:
                values[f.name] = sub_base
            continue
        value = given[f.name]
        if spec.kind == "part":
            nested_partial = partial and isinstance(value, dict)
            values[f.name] = from_dict(spec.part, value, sub_base, nested_partial)
        else:
            values[f.name] = value
    return cls(**values)


def coerce_part(cls: type, given: Any) -> Any:
    """Shorthands a part accepts for its dict: ``cls.from_value`` where the class has one
    (the group's name as a string)."""
    convert = getattr(cls, "from_value", None)
    return convert(given) if convert is not None and not isinstance(given, dict) else given


# --- the JSON schema ------------------------------------------------------------------------


def _schema_of(spec: Spec, default: Any) -> dict[str, Any]:
    if spec.kind == "part":
        out = json_schema(spec.part)
        out["description"] = spec.doc
        out["default"] = {}
        return out
    out: dict[str, Any] = {"description": spec.doc}
    if spec.kind in ("number", "integer"):
        out["type"] = spec.kind
        if spec.low is not None:
            out["exclusiveMinimum" if spec.low_open else "minimum"] = spec.low
        if spec.high is not None:
            out["exclusiveMaximum" if spec.high_open else "maximum"] = spec.high
        alternatives = [{"const": w} for w in spec.words]
        if spec.nullable:
            alternatives.append({"type": "null"})
        if alternatives:
            core = {k: out.pop(k) for k in list(out) if k != "description"}
            out["anyOf"] = [core, *alternatives]
    elif spec.kind == "boolean":
        out["type"] = "boolean"
    elif spec.kind == "choice":
        out["enum"] = list(spec.choices)
    elif spec.kind == "numbers":
        items: dict[str, Any] = {"type": "number"}
        if spec.low is not None:
            items["exclusiveMinimum" if spec.low_open else "minimum"] = spec.low
        if spec.high is not None:
            items["maximum"] = spec.high
        out.update(type="array", items=items, minItems=spec.length or 1)
        if spec.length is not None:
            out["maxItems"] = spec.length
    elif spec.kind == "clusters":
        count = {"type": "integer", "minimum": 1}
        out["anyOf"] = [
            {"type": "null"},
            count,
            {"type": "array", "items": count, "minItems": 2, "maxItems": 2},
        ]
    out["default"] = list(default) if isinstance(default, tuple) else default
    return out


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of a settings dataclass: types, ranges, options,
    defaults and descriptions, as declared (for the docs, editors and the schema file)."""
    props = {}
    for f in fields(cls):
        spec = spec_of(f)
        if spec is not None:
            props[f.name] = _schema_of(spec, _default(f))
    return {"type": "object", "additionalProperties": False, "properties": props}


def leaves(cls: type, prefix: str = "") -> list[tuple[str, Spec, Any]]:
    """Every setting of a dataclass tree as (full path, spec, default), parts walked into.

    Example
    -------
    >>> from ia_stages.settings import Settings
    >>> ("readout.k", None) in [(p, d) for p, _, d in leaves(Settings)]
    True
    """
    out = []
    for f in fields(cls):
        spec = spec_of(f)
        if spec is None:
            continue
        path = _join(prefix, f.name)
        if spec.kind == "part":
            out.extend(leaves(spec.part, path))
        else:
            out.append((path, spec, _default(f)))
    return out
