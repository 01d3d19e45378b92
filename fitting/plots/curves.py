"""Training curves with a curve law's continuations (the report's section "Training curves and
curve-law continuations", :mod:`fitting.report.sections.curves`).

* :func:`plot_curve_continuations` one panel per parent run: its measured curve and its cool-down
  branches', the law's continuation of each, trained and predicted ends
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fitting.plots.style import legend, new_figure, value_colors

if TYPE_CHECKING:  # annotations only: matplotlib is imported lazily
    from matplotlib.figure import Figure

__all__ = ["plot_curve_continuations"]


def plot_curve_continuations(panels: Mapping[str, Sequence[Mapping[str, Any]]], *,
                             ylabel: str = "loss", ncols: int = 3) -> Figure:
    """One panel per family (title: its key), ``ncols`` per row. Each run of a panel is a
    mapping with ``label``, the measured ``steps`` and ``loss`` (a solid line), the law's
    ``pred_steps`` and ``pred`` (dashed; dotted where ``fitted``: the run was in the fit) and
    ``end`` = (step, trained loss, predicted loss): a triangle at the trained end, a cross at
    the predicted one. Colours: the parent black, the branches on the viridis scale."""
    names = list(panels) or [""]
    cols = max(1, min(ncols, len(names)))
    rows = int(np.ceil(len(names) / cols))
    fig, axes = new_figure(ncols=cols, nrows=rows, size=(4.4, 3.4))
    flat = list(axes.ravel())
    for ax in flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(flat, names, strict=False):
        runs = list(panels.get(name, []))
        branch = [r for r in runs if r["label"] != "parent"]
        colors = value_colors([i / max(1, len(branch) - 1) for i in range(len(branch))])
        color_of = {id(r): c for r, c in zip(branch, colors.values(), strict=False)}
        first = True
        for r in runs:
            color = color_of.get(id(r), "black")
            tag = f"{r['label']} (fitted)" if r["fitted"] else r["label"]
            ax.plot(r["steps"], r["loss"], color=color, lw=1, alpha=0.8, label=tag)
            ax.plot(r["pred_steps"], r["pred"], color=color, lw=1.3,
                    ls=":" if r["fitted"] else "--")
            step, trained, predicted = r["end"]
            ax.scatter([step], [trained], marker="v", s=28, color=color, zorder=3,
                       label="trained end" if first else None)
            ax.scatter([step], [predicted], marker="x", s=28, color=color, zorder=3,
                       label="predicted end" if first else None)
            first = False
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        legend(ax, fontsize=6)
        if name:
            ax.set_title(name, fontsize=9)
    return fig
