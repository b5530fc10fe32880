"""Plain-text tables for the command line and the tools' reports."""

from __future__ import annotations


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Columns padded to their widest cell; the first left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
