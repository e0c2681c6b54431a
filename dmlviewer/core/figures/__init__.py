"""Figures drawn from the data (issue 33): the report's and Export View's panels, plots and
writers (SVG, HTML; PNG through OpenCV). No Qt, no matplotlib."""

from .figure import Bars, ColorBar, Figure, Panel, Plot, data_uri, png_bytes
from .svg import figure_svg, plot_svg

__all__ = ["Bars", "ColorBar", "Figure", "Panel", "Plot", "data_uri", "figure_svg", "plot_svg", "png_bytes"]
