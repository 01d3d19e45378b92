"""The transfer matrix τ of the mixture laws (:mod:`fitting.laws.mixture.laws`) as a heat map:
row = target pair i, column = source pair j, τ_ij > 0 transfer, < 0 interference."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fitting.plots.style import new_figure

if TYPE_CHECKING:  # annotations only: matplotlib is imported lazily
    from matplotlib.figure import Figure

__all__ = ["plot_transfer_matrix"]


def plot_transfer_matrix(tau: np.ndarray, pairs: list[str], sd: np.ndarray | None = None,
                         title: str = "transfer τ_ij (row: target, column: source)") -> Figure:
    """Heat map of τ (diagonal 1 left blank) on a diverging scale centred at 0; each cell
    printed as τ (±sd) when K ≤ 12."""
    k = len(pairs)
    side = min(0.55 * k + 2.0, 14.0)
    fig, axes = new_figure(size=(side + 1.0, side))
    ax = axes[0, 0]
    shown = np.array(tau, dtype=float).copy()
    np.fill_diagonal(shown, np.nan)
    lim = max(0.05, float(np.nanmax(np.abs(shown))) if np.isfinite(shown).any() else 1.0)
    im = ax.imshow(shown, cmap="RdBu_r", vmin=-lim, vmax=lim)
    fig.colorbar(im, ax=ax, shrink=0.8, label="τ")
    ticks = np.arange(k)
    ax.set_xticks(ticks, pairs if k <= 30 else [""] * k, rotation=90, fontsize=7)
    ax.set_yticks(ticks, pairs if k <= 30 else [""] * k, fontsize=7)
    ax.set_xlabel("source pair j")
    ax.set_ylabel("target pair i")
    ax.set_title(title, fontsize=9)
    if k <= 12:
        for i in range(k):
            for j in range(k):
                if i == j or not np.isfinite(shown[i, j]):
                    continue
                text = f"{shown[i, j]:.2f}"
                if sd is not None and np.isfinite(sd[i, j]):
                    text += f"\n±{sd[i, j]:.2f}"
                ax.text(j, i, text, ha="center", va="center", fontsize=6)
    return fig
