"""``.. config-reference::``: the configuration reference, generated at build time from the
config schema the package ships (``ia_stages.pipeline.config.SCHEMA``), so that it cannot
drift from what the pipeline validates. The layout is ``schema_tables``'s; this module only
renders it as docutils sections and tables.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from schema_tables import Row, SchemaReference, Section, load_schema
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

_CODE = re.compile(r"`([^`]+)`")


def _inline(text: str) -> list[nodes.Node]:
    """Plain text with the words in backticks as code (nothing else is markup)."""
    out: list[nodes.Node] = []
    pos = 0
    for m in _CODE.finditer(text):
        if m.start() > pos:
            out.append(nodes.Text(text[pos : m.start()]))
        out.append(nodes.literal(text=m.group(1)))
        pos = m.end()
    if pos < len(text):
        out.append(nodes.Text(text[pos:]))
    return out


def _cell(*children: nodes.Node) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph("", "", *children)
    return entry


def _key_cell(row: Row) -> nodes.entry:
    code = nodes.literal(text=row.key)
    if row.link:
        ref = nodes.reference("", "", code, internal=True, refid=row.link)
        return _cell(ref)
    return _cell(code)


def _table(rows: list[Row]) -> nodes.table:
    widths = (22, 16, 10, 12, 40)
    table = nodes.table(classes=["config-reference"])
    group = nodes.tgroup(cols=len(widths))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header = nodes.row()
    for title in ("Key", "Type", "Default", "Range", "Description"):
        header += _cell(nodes.Text(title))
    head += header
    group += head
    body = nodes.tbody()
    for row in rows:
        line = nodes.row()
        line += _key_cell(row)
        line += _cell(*_inline(row.type))
        line += _cell(*_inline(row.default))
        line += _cell(nodes.Text(row.range))
        line += _cell(*_inline(row.description))
        body += line
    group += body
    return table


class ConfigReference(SphinxDirective):
    """Every key of the config schema, a table per mapping, with type, default, range and
    description."""

    option_spec: ClassVar[dict] = {"schema": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        from ia_stages.pipeline.config import SCHEMA, full_schema

        if "schema" in self.options:
            path = Path(self.env.srcdir) / self.options["schema"]
            schema = load_schema(path)
        else:  # the package's: the settings tree's part generated from its declarations
            path = SCHEMA
            schema = full_schema(path)
            import ia_stages.settings as declared

            # the settings' declarations: an incremental build then sees a setting change
            for source in sorted(Path(declared.__file__).parent.glob("*.py")):
                self.env.note_dependency(str(source))
        self.env.note_dependency(str(path))
        try:
            sections: list[Section] = SchemaReference(schema).build()
        except (OSError, ValueError, KeyError) as err:
            raise self.error(f"config-reference: cannot lay out {path}: {err}") from None
        out: list[nodes.Node] = []
        for section in sections:
            node = nodes.section(ids=[section.anchor])
            node += nodes.title(text=section.title)
            if section.intro:
                node += nodes.paragraph("", "", *_inline(section.intro))
            node += _table(section.rows)
            out.append(node)
        return out


def setup(app: Sphinx) -> dict:
    app.add_directive("config-reference", ConfigReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
