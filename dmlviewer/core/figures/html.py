"""A :class:`~.figure.Figure` as an HTML fragment, and the self-contained page around fragments.

Plots become inline SVG (text as text), notes HTML text; the report's pair figures are
``<img>`` elements with ``data:`` URIs (:func:`dmlviewer.core.report.gallery.entry_html`; a
reader's browser decodes them, no request leaves the file). The page has inline CSS only: no
script, no web font, no external URL.
"""

from __future__ import annotations

from html import escape

from .figure import Figure
from .svg import _number, plot_svg

STYLE = """
body { font-family: "DejaVu Sans", Arial, Helvetica, sans-serif; color: #111; margin: 24px; max-width: 1500px; }
h1 { font-size: 22px; margin: 0 0 8px 0; } h2 { font-size: 18px; margin: 28px 0 8px 0; border-bottom: 1px solid #ccc; }
h3 { font-size: 15px; margin: 16px 0 6px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 12px 0; }
td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; } th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figure { border: 1px solid #ddd; border-radius: 4px; padding: 8px 10px; margin: 10px 0 16px 0; }
.row { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; margin: 6px 0; }
.figure img.map { display: block; max-width: 100%; height: auto; }
.note { font-size: 13px; margin: 3px 0; }
.muted { color: #555; font-size: 13px; }
"""


def figure_html(figure: Figure, anchor: str = "") -> str:
    """``figure`` as a ``<div class="figure">`` fragment."""
    out = [f'<div class="figure" id="{escape(anchor)}">' if anchor else '<div class="figure">']
    if figure.title:
        out.append(f"<h3>{escape(figure.title)}</h3>")
    for row in figure.rows:
        out.append('<div class="row">')
        for item in row:
            out.append(f'<div class="plot">{plot_svg(item, standalone=False)}</div>')
        out.append("</div>")
    out.extend(f'<p class="note">{escape(note)}</p>' for note in figure.notes)
    out.append("</div>")
    return "".join(out)


def table_html(header: list[str], rows: list[list]) -> str:
    """A table; numbers are right-aligned and printed with three decimals."""
    def cell(value) -> str:
        if isinstance(value, float):
            return f'<td class="num">{_number(value) if value != value else f"{value:.3f}"}</td>'
        if isinstance(value, int) and not isinstance(value, bool):
            return f'<td class="num">{value}</td>'
        return f"<td>{escape(str(value))}</td>"

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def page(title: str, body: list[str]) -> str:
    """The whole self-contained document (module docstring)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")
