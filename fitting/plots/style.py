"""The figures' shared style: pyplot-free figures, PNG output, short log-scale tick labels,
colours per mixture weight and legends that never warn.

matplotlib itself is imported inside the functions: importing :mod:`fitting` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: matplotlib is imported lazily
    from matplotlib.figure import Figure

__all__ = ["new_figure", "save", "log_scale", "value_colors", "legend"]


def new_figure(ncols: int = 1, nrows: int = 1,
               size: tuple[float, float] = (4.2, 3.4)) -> tuple[Figure, np.ndarray]:
    """A pyplot-free Figure with a grid of axes (safe in headless processes and threads)."""
    from matplotlib.figure import Figure  # lazy: importing fitting must not import matplotlib

    # fixed margins instead of constrained layout: the layout engine costs more than the drawing
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.subplots_adjust(left=0.16 / ncols ** 0.7, right=0.97, bottom=0.15 / nrows ** 0.5,
                        top=1 - 0.1 / nrows ** 0.5, wspace=0.35, hspace=0.5)
    return fig, axes


def save(fig: Figure, path: str, dpi: int = 110, pad_inches: float = 0.06) -> str:
    """Save a figure as PNG (directories created); returns the path. The canvas is fitted to
    what is drawn, so a wide tick label cannot push an axis label off the image.

    The figure is drawn once and the image cropped to its drawn extent plus ``pad_inches`` —
    the picture ``savefig(bbox_inches="tight")`` gives (to a pixel of rounding), which draws
    the figure twice to find that extent first. Only when something is drawn outside the canvas
    (which a crop cannot bring back) is the figure saved that way. The figure's own facecolor
    is the background (matplotlib's default ``savefig.facecolor="auto"``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy, as in new_figure
    from matplotlib.image import imsave

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    own_canvas, figure_dpi = fig.canvas, fig.get_dpi()
    canvas = FigureCanvasAgg(fig)  # attaches itself to fig until the finally below
    fig.set_dpi(dpi)
    try:
        canvas.draw()
        drawn = fig.get_tightbbox(canvas.get_renderer()).padded(pad_inches)  # inches
        width, height = fig.get_size_inches()
        if drawn.x0 < 0 or drawn.y0 < 0 or drawn.x1 > width or drawn.y1 > height:
            fig.savefig(path, dpi=dpi, bbox_inches="tight", pad_inches=pad_inches)
            return path
        pixels = np.asarray(canvas.buffer_rgba())
        top, bottom = (int(round((height - y) * dpi)) for y in (drawn.y1, drawn.y0))
        left, right = (int(round(x * dpi)) for x in (drawn.x0, drawn.x1))
        imsave(path, pixels[top:bottom, left:right], format="png", origin="upper", dpi=dpi)
    finally:
        fig.set_dpi(figure_dpi)
        fig.set_canvas(own_canvas)
    return path


def _short(v: float) -> str:
    """A tick value in few characters: 6k, 20k, 1.5M for counts, 0.4, 2, 0.005 for losses."""
    a = abs(v)
    for suffix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:.3g}"


def log_scale(ax, *which: str) -> None:
    """Log scale on the axes named in ``which`` ("x", "y") with short tick labels.

    matplotlib labels the minor ticks of a log axis spanning about a decade in scientific
    notation ("2×10⁴", "3×10⁴", …), which overlap one another in panels of this size. Here every
    label is a short number; minor ticks are labelled at 2, 3 and 5 × 10^k when the view spans
    under 1.5 decades, and all of them under half a decade.
    """
    from matplotlib import ticker  # lazy, as in new_figure

    for name in which:
        axis = ax.xaxis if name == "x" else ax.yaxis
        (ax.set_xscale if name == "x" else ax.set_yscale)("log")

        def minor(v: float, _pos, axis=axis) -> str:
            lo, hi = sorted(axis.get_view_interval())
            if lo <= 0 or v <= 0 or hi / lo >= 10**1.5:
                return ""
            mantissa = round(v / 10 ** np.floor(np.log10(v) + 1e-9), 6)
            return _short(v) if hi / lo < 10**0.5 or mantissa in (2, 3, 5) else ""

        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: _short(v)))
        axis.set_minor_formatter(ticker.FuncFormatter(minor))


def value_colors(values: Sequence[float]) -> dict:
    """One viridis colour per value in [0, 1] (a mixture weight p), the same in every figure."""
    from matplotlib import colormaps  # lazy, as in new_figure

    cm = colormaps["viridis"]
    return {v: cm(0.1 + 0.8 * float(v)) for v in values}


def legend(ax, **kwargs) -> None:
    """A legend when the panel has labelled artists; otherwise a note that it has no points
    (matplotlib would warn "No artists with labels found" into the main job's output)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)
    elif not ax.collections and not ax.lines:
        ax.text(0.5, 0.5, "no points to plot", transform=ax.transAxes, ha="center",
                va="center", color="0.4")
