"""The read-out under the pair view's panes: the similarity's terms (seed 000 Eq. 3) and the
decomposition rule each model's pair was explained with, in a label of fixed height that shows
the whole lines that fit."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QTextLayout
from PySide6.QtWidgets import QLabel

#: Lines of text the read-out under the panes has room for (its height never changes).
INFO_LINES = 3


def rule_text(rule: str, detail: str = "") -> tuple[str, str]:
    """The rule read-out: a short label for ``PairExplanation.rule`` and its tooltip."""
    from dmlviewer.core.models import FIRST_ORDER

    if rule == FIRST_ORDER:
        return ("first-order (Jacobian) decomposition: cell shares approximate",
                (f"{detail}\nThe head is not piecewise linear at this input: each cell's share is gradient x "
                 "activation (first order); the Taylor remainder is counted in the bias terms, so the terms "
                 "still add up to the similarity."))
    return ("exact decomposition",
            (f"{detail}\nThe head is affine at this input (seed 000 Sec. 4): the cells' shares and the bias "
             "add up to the embedding exactly."))


class ClampedLabel(QLabel):
    """A word-wrapped plain-text label of fixed height that shows the lines that fit and ends the
    last one with "…" (never half a line); ``text()`` is the whole text."""

    def visible_text(self) -> str:
        """The text as drawn: whole lines that fit, the last one elided if text is left over."""
        rect = self.contentsRect()
        fm = self.fontMetrics()
        text = self.text()
        layout = QTextLayout(text, self.font())
        layout.beginLayout()
        lines: list[str] = []
        y = 0.0
        while True:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(rect.width())
            if y + 2 * fm.lineSpacing() > rect.height() and line.textStart() + line.textLength() < len(text):
                rest = text[line.textStart():]  # the last line that fits: the rest, elided
                lines.append(fm.elidedText(rest, Qt.ElideRight, rect.width()))
                break
            lines.append(text[line.textStart():line.textStart() + line.textLength()].rstrip())
            y += fm.lineSpacing()
        layout.endLayout()
        return "\n".join(lines)

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt API
        painter = QPainter(self)
        painter.drawText(self.contentsRect(), int(self.alignment()), self.visible_text())
        painter.end()


def similarity_info(e, others: list | None = None, own_references: bool = False) -> tuple[str, str, str, str]:
    """The read-out of model A's explanation ``e`` (and, while comparing, of the other rows
    ``others``, each with ``letter``, ``similarity`` and ``explanation``; ``own_references``:
    they explain the query with references of their own, so their similarities are not of A's
    pair and no A − B is given): ``(line, tooltip, rule label, rule tooltip)``."""
    others = others or []
    p2p_sum = float(np.asarray(e.point_to_point).sum())
    (hq, wq), (hr, wr) = e.grid_query, e.grid_reference
    both = ""
    if others:
        both = f"Similarity A {e.similarity:+.4f}"
        for row in others:
            s, k = row.similarity, row.letter
            if s is None:
                both += f" · {k} preparing…"
            elif own_references:
                both += f" · {k} {s:+.4f} on its own reference"
            else:
                both += f" · {k} {s:+.4f} (A − {k} {e.similarity - s:+.4f})"
        both += "   ·   A: "
    line = (f"{both}Similarity (cosine) {e.similarity:+.4f} = point-to-point {p2p_sum:+.4f} "
            f"+ query cells · reference bias {e.bias_query:+.4f} "
            f"+ reference cells · query bias {e.bias_reference:+.4f} + bias · bias {e.bias_both:+.4f}"
            f"   ·   grids {hq}×{wq} and {hr}×{wr}   ·   hover a point, click to pin, Esc to release")
    tooltip = (line + "\n\n"  # the whole line, should a narrow window clip it
               "Seed 000 Eq. 3: with E = Σ C_ij + B for each image (C: the contributions of the grid cells, "
               "B: the head's bias), E_q·E_r/(|E_q||E_r|) = Σ C_q·C_r (point-to-point) + Σ C_q·B_r "
               "+ Σ C_r·B_q + B_q·B_r, each divided by |E_q||E_r|.")
    short, detail = rule_text(e.rule, e.rule_detail)
    prepared = [row for row in others if row.explanation is not None]
    if prepared:
        shorts, details = [f"A: {short.split(':')[0]}"], [f"Model A: {detail}"]
        for row in prepared:
            short_k, detail_k = rule_text(row.explanation.rule, row.explanation.rule_detail)
            shorts.append(f"{row.letter}: {short_k.split(':')[0]}")
            details.append(f"Model {row.letter}: {detail_k}")
        short, detail = "\n".join(shorts), "\n\n".join(details)
    return line, tooltip, short, detail
