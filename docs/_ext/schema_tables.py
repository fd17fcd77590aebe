"""The configuration reference as plain data: a JSON schema turned into sections of rows.

Reads only the schema's standard JSON-schema fields (``type``, ``enum``, ``const``,
``default``, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
``minItems``, ``maxItems``, ``items``, ``description``, ``properties``,
``additionalProperties``, ``required``, ``$defs``/``$ref``, ``allOf`` with ``if``/``then``,
``oneOf``/``anyOf``), so it serves whatever writes the schema. No Sphinx here:
``config_reference.py`` renders these sections, and the tests check them against the schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Row:
    """One key: its dotted path, type, default, range and description (plain text; words in
    backticks are code), and the section a mapping or ``$ref`` key is described in."""

    key: str
    type: str
    default: str
    range: str
    description: str
    link: str | None = None


@dataclass
class Section:
    """A table of keys under one heading; ``anchor`` is unique within the reference."""

    title: str
    anchor: str
    intro: str
    rows: list[Row] = field(default_factory=list)


def load_schema(path: str | Path) -> dict:
    """The schema file (YAML or JSON) as a dict."""
    return yaml.safe_load(Path(path).read_text())


def anchor_of(path: str) -> str:
    """The anchor of the section describing ``path`` (``ia.search`` -> ``config-ia-search``)."""
    if not path:
        return "config-top-level"
    cleaned = "".join(c if c.isalnum() else "-" for c in path.lower())
    return "config-" + "-".join(part for part in cleaned.split("-") if part)


def _flow(value: Any) -> str:
    """A default written as in a YAML config: ``null``, ``true``, ``[0.8, 1.25]``, ``{}``."""
    if isinstance(value, str):
        return value
    return json.dumps(value).replace('"', "")


def _ref_name(ref: str) -> str:
    if not ref.startswith("#/$defs/"):
        raise ValueError(f"only local $defs references are supported, got {ref!r}")
    return ref.split("/")[-1]


class SchemaReference:
    """Walks a schema and lays out its sections: the top-level keys, one section per mapping
    (nested keys by dotted path), one per ``$defs`` entry that is an object, and the dataset
    kinds of an ``allOf`` of ``if``/``then`` clauses."""

    def __init__(self, schema: dict):
        self.schema = schema
        self.defs: dict[str, dict] = schema.get("$defs", {})
        self.sections: list[Section] = []
        self._def_anchor = {name: anchor_of(f"defs.{name}") for name in self.defs}

    # type, range, default --------------------------------------------------------------

    def describe_type(self, node: dict) -> tuple[str, str | None]:
        """The type of ``node`` in words, and the anchor it links to (a ``$ref``)."""
        if node is True:
            return "any", None
        if "$ref" in node:
            name = _ref_name(node["$ref"])
            target = self.defs[name]
            if self._is_object(target):
                return f"mapping ({name})", self._def_anchor[name]
            inner, link = self.describe_type(target)
            return inner, link
        if "const" in node:
            return f"`{_flow(node['const'])}`", None
        if "enum" in node:
            return "one of " + ", ".join(f"`{_flow(v)}`" for v in node["enum"]), None
        for combinator in ("oneOf", "anyOf"):
            if combinator in node:
                kinds = [self.describe_type(option)[0] for option in node[combinator]]
                return " or ".join(kinds), None
        kinds = node.get("type")
        if kinds is None:
            return ("mapping" if "properties" in node else "any"), None
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        words = []
        for kind in kinds:
            if kind == "array":
                words.append(self._array_type(node))
            elif kind == "object":
                extra = node.get("additionalProperties")
                if isinstance(extra, dict):
                    inner, _ = self.describe_type(extra)
                    words.append(f"mapping of names to {inner}")
                else:
                    words.append("mapping")
            else:
                words.append(kind)
        link = None
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and "$ref" in extra:
            link = self._def_anchor.get(_ref_name(extra["$ref"]))
        return " or ".join(words), link

    def _array_type(self, node: dict) -> str:
        items = node.get("items")
        lo, hi = node.get("minItems"), node.get("maxItems")
        if items is None:
            inner = "values"
        else:
            inner = self.describe_type(items)[0]
        if lo is not None and lo == hi:
            return f"list of {lo} × {inner}"
        return f"list of {inner}"

    @staticmethod
    def describe_range(node: dict) -> str:
        """The bounds of a number, and of a list's length and items, in words."""
        if node is True:
            return ""
        parts = []
        if "minimum" in node:
            parts.append(f"≥ {_flow(node['minimum'])}")
        if "exclusiveMinimum" in node:
            parts.append(f"> {_flow(node['exclusiveMinimum'])}")
        if "maximum" in node:
            parts.append(f"≤ {_flow(node['maximum'])}")
        if "exclusiveMaximum" in node:
            parts.append(f"< {_flow(node['exclusiveMaximum'])}")
        lo, hi = node.get("minItems"), node.get("maxItems")
        if lo is not None and lo != hi:
            parts.append(f"at least {lo} item{'s' if lo != 1 else ''}")
        if hi is not None and lo != hi:
            parts.append(f"at most {hi} items")
        if node.get("minLength"):
            parts.append(
                f"at least {node['minLength']} character{'s' if node['minLength'] != 1 else ''}"
            )
        if node.get("minProperties"):
            parts.append(f"at least {node['minProperties']} entry")
        if node.get("uniqueItems"):
            parts.append("no repeats")
        items = node.get("items")
        if isinstance(items, dict):
            inner = SchemaReference.describe_range(items)
            if inner:
                parts.append(f"each item {inner}")
        return ", ".join(parts)

    def _default(self, node: dict, required: bool) -> str:
        if node is not True and "default" in node:
            return f"`{_flow(node['default'])}`"
        return "required" if required else "—"

    def _is_object(self, node: Any) -> bool:
        if not isinstance(node, dict):
            return False
        if "$ref" in node:
            return self._is_object(self.defs[_ref_name(node["$ref"])])
        return "properties" in node or "allOf" in node

    def _resolved(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            merged = dict(self.defs[_ref_name(node["$ref"])])
            merged.update({k: v for k, v in node.items() if k != "$ref"})
            node = merged
        return node

    # sections ----------------------------------------------------------------------------

    def row(self, path: str, node: Any, required: bool, link: str | None = None) -> Row:
        """The row of one key."""
        kind, ref_link = self.describe_type(node)
        resolved = self._resolved(node)
        description = resolved.get("description", "") if isinstance(resolved, dict) else ""
        rng = self.describe_range(resolved) if isinstance(resolved, dict) else ""
        default = self._default(
            node if isinstance(node, dict) and "default" in node else resolved, required
        )
        return Row(path, kind, default, rng, " ".join(description.split()), link or ref_link)

    def object_section(self, path: str, title: str, node: dict, intro: str = "") -> Section:
        """The section of a mapping: a row per key; nested mappings get their own sections
        after it (their rows link there)."""
        section = Section(
            title, anchor_of(path), intro or " ".join(node.get("description", "").split())
        )
        self.sections.append(section)
        required = set(node.get("required", []))
        nested: list[tuple[str, dict]] = []
        for key, sub in node.get("properties", {}).items():
            sub_path = f"{path}.{key}" if path else key
            if isinstance(sub, dict) and "properties" in sub and "$ref" not in sub:
                section.rows.append(self.row(sub_path, sub, key in required, anchor_of(sub_path)))
                nested.append((sub_path, sub))
            else:
                section.rows.append(self.row(sub_path, sub, key in required))
        for sub_path, sub in nested:
            self.object_section(sub_path, sub_path, sub)
        return section

    def kinds_sections(self, path: str, node: dict) -> None:
        """One section per ``if: {properties: {K: {const | enum}}} then: {properties}``
        clause of ``node['allOf']``: the keys that kind accepts, with its defaults; a key
        given as ``true`` takes the shared definition of ``node['properties']``."""
        shared = node.get("properties", {})
        for clause in node.get("allOf", []):
            condition = clause.get("if", {}).get("properties", {})
            then = clause.get("then", {})
            if len(condition) != 1 or "properties" not in then:
                raise ValueError(f"{path}: an allOf clause this reference cannot lay out")
            ((key, test),) = condition.items()
            values = [test["const"]] if "const" in test else list(test.get("enum", []))
            label = " / ".join(str(v) for v in values)
            section = Section(
                f"{path}: {key} {label}",
                anchor_of(f"{path}.{key}.{'.'.join(map(str, values))}"),
                f"The keys of a dataset whose `{key}` is {', '.join(f'`{v}`' for v in values)}.",
            )
            self.sections.append(section)
            nested = []
            required = set(then.get("required", [])) | {key}
            for name, sub in then["properties"].items():
                base = shared.get(name, {})
                base = base if isinstance(base, dict) else {}
                if name == key:
                    node: Any = {"enum": values, "description": base.get("description", "")}
                elif sub is True:
                    node = base
                elif "$ref" in sub:
                    node = dict(sub)
                    if base.get("description") and "description" not in node:
                        node["description"] = base["description"]
                else:
                    node = {**base, **sub}
                sub_path = f"{path}.{name}"
                if isinstance(node, dict) and "properties" in node and "$ref" not in node:
                    child_anchor = f"{section.anchor}-{name}"
                    section.rows.append(self.row(sub_path, node, False, child_anchor))
                    nested.append((name, node, child_anchor))
                else:
                    section.rows.append(self.row(sub_path, node, name in required))
            for name, node, child_anchor in nested:
                child = Section(
                    f"{path}.{name} ({label})",
                    child_anchor,
                    " ".join(node.get("description", "").split()),
                )
                self.sections.append(child)
                for k, v in node["properties"].items():
                    child.rows.append(self.row(f"{path}.{name}.{k}", v, False))

    def build(self, dataset_path: str = "datasets.NAME") -> list[Section]:
        """Every section, in order: the top-level keys and their mappings, then each
        ``$defs`` object (a dataset's blocks), with a ``$defs`` entry that has an ``allOf``
        of kinds laid out kind by kind."""
        self.sections = []
        self.object_section(
            "", "Top-level keys", self.schema, " ".join(self.schema.get("description", "").split())
        )
        for name, node in self.defs.items():
            if not self._is_object(node):
                continue
            where = self._where(name, node, dataset_path)
            if "allOf" in node:
                section = self.object_section(f"defs.{name}", f"{where}: every kind", node)
                section.anchor = self._def_anchor[name]
                self.kinds_sections(where, node)
            else:
                section = self.object_section(f"defs.{name}", where, node)
                section.anchor = self._def_anchor[name]
                for row in section.rows:
                    row.key = row.key.replace(f"defs.{name}", where, 1)
        self._rename_defs_paths(dataset_path)
        return self.sections

    def _where(self, name: str, node: dict, dataset_path: str) -> str:
        """Where a ``$defs`` entry is written: the datasets (the one with kinds), a top-level
        key that refers to it (the settings tree: the top-level block, and each dataset's),
        else a block of a dataset."""
        if "allOf" in node:
            return dataset_path
        top = self.schema.get("properties", {}).get(name, {})
        if isinstance(top, dict) and "$ref" in top and _ref_name(top["$ref"]) == name:
            return name
        return f"{dataset_path}.{name}"

    def _rename_defs_paths(self, dataset_path: str) -> None:
        """Keys and titles of nested ``$defs`` sections read as where they are written."""
        for name, node in self.defs.items():
            where = self._where(name, node, dataset_path)
            for section in self.sections:
                if section.title.startswith(f"defs.{name}"):
                    section.title = section.title.replace(f"defs.{name}", where, 1)
                for row in section.rows:
                    if row.key.startswith(f"defs.{name}"):
                        row.key = row.key.replace(f"defs.{name}", where, 1)


def leaf_defaults(schema: dict) -> dict[str, Any]:
    """Every key path of the schema's top-level mappings with a ``default`` (a reference of
    what the tables must show), nested mappings by dotted path."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: dict) -> None:
        for key, sub in node.get("properties", {}).items():
            path = f"{prefix}.{key}" if prefix else key
            if not isinstance(sub, dict):
                continue
            if "default" in sub:
                out[path] = sub["default"]
            if "properties" in sub:
                walk(path, sub)

    walk("", schema)
    return out
