"""What the pair view's panes show (seed 000 Sec. 3, Eq. 2-3): each row's overall maps of the
chosen method and sign (one scale per row, one for all rows with "Shared scale", or A minus B
on one symmetric scale with "Difference"), and the hover renderers, colour bars and read-outs
of the partial maps that hovering draws (:class:`~dmlviewer.gui.pair.hover_link.HoverLink`).
:class:`PairMaps` is a part of :class:`~dmlviewer.gui.pair.pair_view.PairView` (it reads the
view's rows, display options and link).
"""

from __future__ import annotations

import numpy as np

from dmlviewer.core.explain.methods import label as method_label
from dmlviewer.core.scene.scene import overall_levels
from dmlviewer.gui.pair.colormaps import overlay_lut
from dmlviewer.gui.pair.hover_link import QUERY, REFERENCE, SIDE_NAMES
from dmlviewer.gui.pair.pair_row import PairRow
from dmlviewer.gui.pair.row_controller import OCCLUSION


class PairMaps:
    """The overall and partial maps on the pair view's panes (see the module docstring)."""

    def _row_maps(self, row: PairRow) -> dict[str, np.ndarray] | None:
        """``row``'s overall maps of the current method and sign (``side -> H x W``), or None."""
        if self._maps_state(row) != "done":
            return None
        return {side: row.explanation.overall(self.method, side, self.sign) for side in SIDE_NAMES}

    def difference_maps(self, row: int = 1) -> dict[str, np.ndarray] | None:
        """A's overall maps minus those of row ``row`` (current method and sign, at image
        size), or None."""
        if self.state != "ready" or row >= len(self.rows):
            return None
        a, other = self._row_maps(self.rows[0]), self._row_maps(self.rows[row])
        if a is None or other is None:
            return None
        return {side: a[side] - other[side] for side in SIDE_NAMES}

    def _show_overall(self) -> None:
        """Put the current method's overall maps on every row's panes (also the 'restore' of
        hover): each row on its own scale, or one scale for all rows with "Shared scale", or
        A minus the row's model on one symmetric scale with "Difference"."""
        if self.state != "ready":
            return
        if self._maps_state(self.rows[0]) == "missing":
            for row in self.rows:
                self._request_maps(row)
            return
        unit = ("similarity share per cell" if self.method.startswith("decomposition")
                else "similarity lost when hidden" if self.method == OCCLUSION else "map value")
        maps = [self._row_maps(row) for row in self.rows]
        shared = self.shared_scale and not self.difference
        name, signed = self.display.colormap, self.sign == "signed"
        for k, (row, shown) in enumerate(zip(self.rows, maps)):
            for pane in row.panes:
                pane.show_readout(None)
            state = self._maps_state(row)
            if state == "missing":
                self._request_maps(row)
                continue
            if state == "absent":
                if row.state == "ready" and self.method not in row.methods:
                    row.say(f"{method_label(self.method)} is shown for model A only")
                continue
            if state == "failed":
                row.say(f"{method_label(self.method)} unavailable:\n{row.overall[self.method]}")
                continue
            if k > 0 and self.difference:
                diff = self.difference_maps(k)
                if diff is None:
                    continue
                levels = overall_levels([self.rows[0].explanation, row.explanation], self.method, self.sign,
                                        difference=True)
                for pane, side in zip(row.panes, SIDE_NAMES):
                    pane.show_message(None)
                    pane.set_map(diff[side], levels)
                    pane.set_colorbar(name, True, levels, f"A − {row.letter} {unit.replace('similarity ', '')}")
                continue
            for pane, side in zip(row.panes, SIDE_NAMES):
                pane.show_message(None)
                together = [r.explanation for r, m in zip(self.rows, maps) if m is not None] if shared else []
                levels = overall_levels(together or [row.explanation], self.method, self.sign, side)
                pane.set_map(shown[side], levels)
                if not np.any(shown[side]):
                    pane.show_message(f"this map has no {self.sign} part")
                pane.set_colorbar(name, signed, levels, unit)

    # -- hover
    def _hover_tensor(self, row: PairRow) -> np.ndarray:
        """The point-to-point tensor hovering shows on ``row``: its decomposition's, or with the
        Occlusion map the occlusion interaction (``core.explain.occlusion``)."""
        occlusion = row.overall.get(OCCLUSION) if self.method == OCCLUSION else None
        if occlusion is not None and not isinstance(occlusion, str):
            return occlusion.point_to_point
        return row.explanation.point_to_point

    def _build_renderers(self) -> None:
        """Each row's hover renderers for the current display (cheap: no copies of the
        photographs, a few small buffers), and what the hover link writes with them."""
        from dmlviewer.core.explain.hover import DifferenceRenderer, pair_scale, side_renderers

        for row in self._made:
            row.renderers, row.scale = {}, None
            row.link.renderers = {}
        if self.state != "ready":
            return
        sign, by_pair = self.sign, self.display.scale == "pair"
        lut = overlay_lut(self.display.colormap, sign == "signed")
        drawn = [row for row in self.rows if row.state == "ready" and self.method in row.methods]
        tensors = {row: self._hover_tensor(row) for row in drawn}
        scales = {row: pair_scale(tensors[row]) if by_pair else None for row in drawn}
        if by_pair and len(drawn) > 1 and (self.shared_scale or self.difference):  # one scale for all rows
            common = max(scales.values())
            scales = dict.fromkeys(drawn, common)
        for row in drawn:
            e = row.explanation
            occluded = tensors[row] is not e.point_to_point
            row.scale = scales[row]
            shapes = (tuple(e.image_shape_query), tuple(e.image_shape_reference))  # the row's own photographs
            row.renderers = dict(enumerate(side_renderers(
                tensors[row], shapes, (tuple(e.grid_query), tuple(e.grid_reference)), lut=lut, sign=sign,
                scale=row.scale, similarity=None if occluded else float(e.similarity))))
        first = self.rows[0]
        self.link.shared_peak = self.shared_scale and not self.difference and not by_pair
        for k, row in enumerate(self.rows):
            link = row.link
            if row not in drawn:
                continue
            if k > 0 and self.difference and first in drawn:
                lut_d = overlay_lut(self.display.colormap, True)
                link.renderers = {side: DifferenceRenderer(first.renderers[side], row.renderers[side], lut=lut_d,
                                                           scale=row.scale) for side in (QUERY, REFERENCE)}
                if row.scale is None:
                    link.colorbar = (self.display.colormap, True, (-1.0, 1.0), f"A − {row.letter} ÷ max |A − {row.letter}|")
                else:
                    link.colorbar = (self.display.colormap, True, (-row.scale, row.scale),
                                     f"A − {row.letter}, cosine contribution")
                link.readout = lambda p, k=row.letter: None if p.peak is None else f"largest |A − {k}| {p.peak:.2g}"
                continue
            link.renderers = row.renderers
            link.colorbar = self._partial_colorbar(row.scale)
            whose = f"{row.letter}’s" if self.comparing else "the"
            link.readout = (lambda p, whose=whose, each=row.scale is None, sign=self.sign:
                            self._readout(p, whose, each, sign))

    def _partial_colorbar(self, scale: float | None) -> tuple:
        """The colour bar of partial maps on ``scale`` (None: each map its own maximum)."""
        signed = self.sign == "signed"
        if scale is None:
            levels, label = ((-1.0, 1.0) if signed else (0.0, 1.0)), "fraction of this map's maximum"
            if self.shared_scale and not self.difference:
                label = "fraction of A's and B's larger maximum"
        else:
            levels, label = ((-scale, scale) if signed else (0.0, scale)), "contribution to the cosine"
        if self.sign == "negative":
            label = "− " + label
        return self.display.colormap, signed, levels, label

    @staticmethod
    def _readout(point, whose: str, each_map: bool, sign: str = "positive") -> str | None:
        """The hovered point's share of its model's similarity (and on "each map" the value its
        map's top colour stands for), printed on the other pane; an empty map (a background
        point) says there is nothing to show instead of a peak (issue 42 item 9)."""
        if point.share is None:
            return None
        text = f"<b>{100.0 * point.share:+.1f}%</b> of {whose} similarity"
        if point.empty:
            text += "<br>nothing to show: " + ("its map is all zero" if sign == "signed" else f"no {sign} part here")
        elif each_map and point.peak is not None:
            text += f"<br>peak {point.peak:.2g}"
        return text

    def _describe(self, side: int | None, x: float, y: float, points: list, pinned: bool) -> str:
        """The status bar's line for the point on screen: its share of each model's similarity,
        the model named while comparing ("A +22.49%, B +18.02% of each model's similarity",
        issue 42 item 5); "" when cleared."""
        if side is None:
            return ""
        text = f"{SIDE_NAMES[side]} ({x:.0f}, {y:.0f})"
        first = self.rows[0]
        shares = [(row.letter, p.share) for row, p in zip(self.rows, points) if p is not None and p.share is not None]
        if first.explanation is not None and self._hover_tensor(first) is not first.explanation.point_to_point:
            text += ": occlusion interaction (similarity that this cell and each other-image cell hold together)"
        elif self.comparing and shares:  # short: read whole in a 1366-px status bar
            text += ": " + ", ".join(f"{k} {100.0 * share:+.2f}%" for k, share in shares)
            text += " of each model's similarity" if len(shares) > 1 else f" of {shares[0][0]}'s similarity"
        elif shares:
            text += f": {100.0 * shares[0][1]:+.2f}% of the similarity"
        if pinned:
            text += "  [pinned, Esc to release]"
        return text

    def _apply_colors_to_panes(self) -> None:
        lut = overlay_lut(self.display.colormap, self.sign == "signed")
        lut_b = overlay_lut(self.display.colormap, True) if self.difference else lut
        for k, row in enumerate(self._made):
            for pane in row.panes:
                pane.set_lut(lut if k == 0 else lut_b)

    def _apply_colors(self) -> None:
        self._apply_colors_to_panes()
        self._update_titles()
        if self.state == "ready":
            self._build_renderers()
            self._show_overall()
            self.link.refresh()

