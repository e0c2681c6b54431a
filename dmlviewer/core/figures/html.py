"""A :class:`~.figure.Figure` as an HTML fragment, and the self-contained page around fragments.

Panels become ``<img>`` elements with PNG ``data:`` URIs (a reader's browser decodes them; no
request leaves the file), captions and notes HTML text, plots inline SVG (text as text). The
page has inline CSS only: no script, no web font, no external URL.
"""

from __future__ import annotations

from html import escape

from .figure import COLORBAR_HEIGHT, Figure, Panel, data_uri, png_bytes
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
.panel { margin: 0; font-size: 12px; }
.panel img.map { display: block; }
.bar { display: flex; justify-content: space-between; font-size: 11px; }
.bar img { display: block; width: 100%; }
.note { font-size: 13px; margin: 3px 0; }
.muted { color: #555; font-size: 13px; }
"""


def panel_html(panel: Panel) -> str:
    h, w = panel.image.shape[:2]
    parts = [f'<figure class="panel" style="width:{w}px">',
             f'<img class="map" width="{w}" height="{h}" alt="{escape(panel.caption)}" '
             f'src="{data_uri(png_bytes(panel.image))}">']
    if panel.colorbar is not None:
        bar = panel.colorbar
        ramp = bar.ramp(w, COLORBAR_HEIGHT)
        parts.append(f'<img class="colorbar" width="{w}" height="{COLORBAR_HEIGHT}" alt="colour bar" '
                     f'src="{data_uri(png_bytes(ramp))}">')
        parts.append(f'<div class="bar"><span>{_number(bar.low)}</span><span>{_number(bar.high)}</span></div>')
    if panel.caption:
        parts.append(f"<figcaption>{escape(panel.caption)}</figcaption>")
    parts.append("</figure>")
    return "".join(parts)


def figure_html(figure: Figure, anchor: str = "") -> str:
    """``figure`` as a ``<div class="figure">`` fragment."""
    out = [f'<div class="figure" id="{escape(anchor)}">' if anchor else '<div class="figure">']
    if figure.title:
        out.append(f"<h3>{escape(figure.title)}</h3>")
    for row in figure.rows:
        out.append('<div class="row">')
        for item in row:
            out.append(panel_html(item) if isinstance(item, Panel)
                       else f'<div class="plot">{plot_svg(item, standalone=False)}</div>')
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
