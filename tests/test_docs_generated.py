"""The manual's generated parts read what they claim to: the configuration reference shows
every key of the config schema with its default and bounds, and the benchmark tables are the
numbers in the bench scripts' saved outputs (docs/_ext; no Sphinx needed)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import bench_outputs  # noqa: E402
import schema_tables  # noqa: E402

from ia_stages.pipeline.config import full_schema  # noqa: E402
from ia_stages.settings import Settings  # noqa: E402
from ia_stages.settings.spec import leaves  # noqa: E402


def _rows(schema: dict) -> dict[str, schema_tables.Row]:
    rows = {}
    for section in schema_tables.SchemaReference(schema).build():
        for row in section.rows:
            rows.setdefault(row.key, row)
    return rows


def test_every_key_of_the_config_schema_is_in_the_reference_with_its_default():
    schema = full_schema()
    rows = _rows(schema)
    defaults = schema_tables.leaf_defaults(schema)
    assert len(defaults) > 40  # the top-level sections' keys, nested ones included
    for path, default in defaults.items():
        assert path in rows, path
        shown = rows[path].default.strip("`")
        assert shown == (
            default if isinstance(default, str) else json.dumps(default).replace('"', "")
        ), (path, shown, default)


def test_every_setting_of_the_tree_is_in_the_reference_with_its_default():
    rows = _rows(full_schema())
    for path, _, default in leaves(Settings):
        row = rows[f"settings.{path}"]
        shown = row.default.strip("`")
        want = list(default) if isinstance(default, tuple) else default
        assert shown == (want if isinstance(want, str) else json.dumps(want).replace('"', "")), path


def test_the_dataset_kinds_get_their_own_defaults_and_the_shared_blocks_are_linked():
    schema = full_schema()
    sections = schema_tables.SchemaReference(schema).build()
    titles = {s.title: s for s in sections}
    kinds = schema["$defs"]["dataset"]["properties"]["kind"]["enum"]
    for kind in kinds:
        assert any(title.endswith(kind) or f" {kind} " in title + " " for title in titles), kind
    images = titles["datasets.NAME: kind images"]
    by_key = {r.key: r for r in images.rows}
    assert by_key["datasets.NAME.path"].default == "required"
    every = {r.key: r for r in titles["datasets.NAME: every kind"].rows}
    tree = every["datasets.NAME.settings"]
    assert tree.link == schema_tables.anchor_of("defs.settings")  # a $ref links to its section
    assert any(s.anchor == tree.link for s in sections)
    shear = {r.key: r for r in titles["settings.group"].rows}["settings.group.shear"]
    assert shear.range == "≥ 0.0, < 1.0" and shear.default == "`0.25`"


def test_a_small_schema_reads_as_its_standard_fields_say():
    schema = {
        "type": "object",
        "required": ["n"],
        "properties": {
            "n": {"type": "integer", "minimum": 2, "description": "count"},
            "rate": {"type": ["number", "null"], "exclusiveMinimum": 0, "default": None},
            "mode": {"enum": ["a", "b"], "default": "a"},
            "block": {"$ref": "#/$defs/block", "default": {}},
            "pair": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": 2,
                "maxItems": 2,
                "default": [1, 2],
            },
        },
        "$defs": {
            "block": {"type": "object", "properties": {"k": {"type": "integer", "default": 3}}}
        },
    }
    rows = _rows(schema)
    assert (rows["n"].type, rows["n"].default, rows["n"].range) == ("integer", "required", "≥ 2")
    assert (rows["rate"].type, rows["rate"].default, rows["rate"].range) == (
        "number or null",
        "`null`",
        "> 0",
    )
    assert rows["mode"].type == "one of `a`, `b`"
    assert rows["pair"].type == "list of 2 × number" and rows["pair"].default == "`[1, 2]`"
    assert rows["block"].type == "mapping (block)" and rows["block"].link
    # a $def that a top-level key refers to is written under that key
    assert rows["block.k"].default == "`3`"


def test_a_schema_it_cannot_lay_out_is_an_error_not_a_silent_gap():
    schema = {
        "$defs": {
            "d": {"type": "object", "properties": {"kind": {"enum": ["x"]}}, "allOf": [{"not": {}}]}
        }
    }
    with pytest.raises(ValueError, match="allOf clause"):
        schema_tables.SchemaReference(schema).build()


def test_the_ten_seed_table_is_the_file_and_agrees_with_its_own_summary_line():
    table = bench_outputs.affine_ten_seeds(ROOT)
    text = (ROOT / "bench" / "results" / "groups_affnist_10_seeds.txt").read_text()
    summary = re.search(
        r"with K mean ([0-9.]+) sd ([0-9.]+) median ([0-9.]+) worst ([0-9.]+); "
        r"without K mean ([0-9.]+) sd ([0-9.]+)",
        text,
    )
    rows = {r[0]: r for r in table.rows}
    assert len([r for r in table.rows if r[0].isdigit()]) == 10
    assert rows["mean ± sd"][1] == f"{float(summary[1]):.3f} ± {float(summary[2]):.3f}"
    assert rows["mean ± sd"][2] == f"{float(summary[5]):.3f} ± {float(summary[6]):.3f}"
    assert rows["worst"][1] == f"{float(summary[4]):.3f}"


@pytest.mark.parametrize("name", sorted(bench_outputs.TABLES))
def test_every_benchmark_table_reads_its_files_and_names_its_command(name):
    table = bench_outputs.TABLES[name](ROOT)
    assert table.rows and all(len(row) == len(table.header) for row in table.rows)
    assert table.command.startswith(("python bench/", "cd bench && python"))
    for source in table.sources:
        assert (ROOT / "bench" / "results" / source).is_file()


def test_a_changed_bench_output_fails_with_the_file_name(tmp_path):
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "groups_affnist_10_seeds.txt").write_text("no runs\n")
    with pytest.raises(ValueError, match=r"groups_affnist_10_seeds\.txt"):
        bench_outputs.affine_ten_seeds(tmp_path)
