"""``.. bench-table:: NAME``: a benchmark table read at build time from the bench scripts'
saved outputs (``bench_outputs.TABLES``), with the claim it measures, the command that
measured it and the files it was read from. A missing or changed output fails the build.
"""

from __future__ import annotations

from pathlib import Path

from bench_outputs import RESULTS, TABLES
from config_reference import _inline
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _entry(text: str) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph("", "", *_inline(text))
    return entry


class BenchTable(SphinxDirective):
    """One benchmark table."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        if name not in TABLES:
            raise self.error(f"bench-table: no table {name!r} (known: {', '.join(TABLES)})")
        root = Path(self.env.srcdir).parent
        try:
            table = TABLES[name](root)
        except ValueError as err:
            raise self.error(f"bench-table {name}: {err}") from None
        for source in table.sources:
            self.env.note_dependency(str(root / RESULTS / source))
        out: list[nodes.Node] = [nodes.paragraph("", "", *_inline(table.claim))]
        grid = nodes.table(classes=["bench-table"])
        group = nodes.tgroup(cols=len(table.header))
        grid += group
        for _ in table.header:
            group += nodes.colspec(colwidth=1)
        head, row = nodes.thead(), nodes.row()
        for title in table.header:
            row += _entry(title)
        head += row
        group += head
        body = nodes.tbody()
        for cells in table.rows:
            row = nodes.row()
            for cell in cells:
                row += _entry(cell)
            body += row
        group += body
        out.append(grid)
        measured = nodes.paragraph("", "Measured by ")
        for k, command in enumerate(table.command.split("; ")):
            if k:
                measured += nodes.Text(", ")
            measured += nodes.literal(text=command)
        measured += nodes.Text("; read from ")
        for k, source in enumerate(table.sources):
            if k:
                measured += nodes.Text(", ")
            measured += nodes.literal(text=str(RESULTS / source))
        measured += nodes.Text(".")
        out.append(measured)
        return out


def setup(app: Sphinx) -> dict:
    app.add_directive("bench-table", BenchTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
