"""Figures of the report's sections for Chen, Caillaut and Ghorbani, and f(p) side by side
(matplotlib ``Figure`` objects, no pyplot state; the style of :mod:`fitting.plots.style`).

* :func:`plot_dpl_curves`         loss against the sampling ratio with the DPL's U-curve per
  direction, trained points, temperature baselines and the eq. 7 optimum (Chen Fig. 2/5)
* :func:`plot_chinchilla_contours` iso-loss contours of L(N, D) with the runs' trajectories and
  the compute-optimal frontier (Caillaut eq. 2; Hoffmann et al. Fig. 4)
* :func:`plot_bivariate_slices`   loss against N_e at fixed N_d and against N_d at fixed N_e with
  the fitted law (Ghorbani Fig. 2)
* :func:`plot_fraction_panels`    f(p) of several studies, one panel each (Fernandes Fig. 6
  centre and right: related vs distant pairs, XX→En vs En→XX)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fitting.plots.style import legend, log_scale, new_figure

if TYPE_CHECKING:  # annotations only: matplotlib is imported lazily
    from matplotlib.figure import Figure

__all__ = ["plot_dpl_curves", "plot_chinchilla_contours", "plot_bivariate_slices",
           "plot_fraction_panels"]


def _colors(keys: Sequence[Any]) -> dict:
    from matplotlib import colormaps  # lazy: importing fitting must not import matplotlib

    cm = colormaps["viridis"]
    k = max(1, len(keys) - 1)
    return {key: cm(0.1 + 0.75 * i / k) for i, key in enumerate(keys)}


def _grid(ncols: int, n: int) -> tuple[int, int]:
    ncols = max(1, min(ncols, n))
    return ncols, int(np.ceil(n / ncols))


def _hide_unused(axes: np.ndarray, used: int) -> None:
    for ax in axes.ravel()[used:]:
        ax.set_visible(False)


def plot_dpl_curves(panels: Mapping[str, Mapping[str, Mapping[str, Any]]], *,
                    ncols: int = 3) -> Figure:
    """One panel per direction (``panels[direction]``), one colour per series (model size).

    Each series is a mapping with ``points`` (p, loss) of the explicit-weight runs, ``curve``
    (p grid, fitted F_i) and optionally ``baselines`` [(p, loss, tag)] (trained temperature
    mixtures, crosses) and ``optimum`` (p̂, predicted F_i) of eq. 7 (a star).
    """
    names = list(panels)
    nc, nr = _grid(ncols, len(names))
    fig, axes = new_figure(ncols=nc, nrows=nr)
    for ax, name in zip(axes.ravel(), names, strict=False):
        series = panels[name]
        colors = _colors(list(series))
        marked = False
        for label, s in series.items():
            c = colors[label]
            if s.get("curve") is not None:
                ax.plot(*s["curve"], color=c, lw=1.3, label=f"DPL {label}")
            if s.get("points") is not None and np.size(s["points"][0]):
                ax.scatter(*s["points"], color=c, s=20, zorder=3, label=f"trained {label}")
            for p, y, tag in s.get("baselines") or []:
                ax.scatter([p], [y], marker="x", color=c, s=40, zorder=4,
                           label=None if marked else "trained baselines (measured)")
                marked = True
                ax.annotate(tag, (p, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
            if s.get("optimum") is not None:
                ax.scatter(*s["optimum"], marker="*", s=110, color=c, edgecolor="k",
                           zorder=5, label=f"eq. 7 optimum {label}")
        _label_panel(ax, "sampling ratio p of this direction", "test cross-entropy (nats/token)",
                     name, legend_size=6)
    _hide_unused(axes, len(names))
    return fig


def plot_chinchilla_contours(panels: Mapping[str, Mapping[str, Any]], *, ncols: int = 2) -> Figure:
    """Per panel: iso-loss contours of ``predict(N, D)`` over ``n_range`` × ``d_range`` (log
    axes), each run's trajectory ``trajectories[N] = D values`` (its evaluations, a vertical
    line at its N), the compute-optimal frontier ``frontier = (N*, D*)`` and the compute budgets
    ``budgets = (N*, D*)`` marked on it; ``rounds = {round: [(N, D), …]}``: the runs each round
    of an adaptive study added, one marker per round."""
    names = list(panels)
    nc, nr = _grid(ncols, len(names))
    fig, axes = new_figure(ncols=nc, nrows=nr, size=(4.6, 3.8))
    for ax, name in zip(axes.ravel(), names, strict=False):
        pan = panels[name]
        n_lo, n_hi = pan["n_range"]
        d_lo, d_hi = pan["d_range"]
        nn, dd = np.meshgrid(np.geomspace(n_lo, n_hi, 80), np.geomspace(d_lo, d_hi, 80))
        z = np.asarray(pan["predict"](nn, dd), float)
        finite = z[np.isfinite(z)]
        if finite.size:
            levels = np.unique(np.quantile(finite, np.linspace(0.03, 0.97, 9)))
            if levels.size >= 2:
                cs = ax.contour(nn, dd, z, levels=levels, cmap="viridis_r", linewidths=0.9)
                ax.clabel(cs, fontsize=6, fmt="%.3g")
        traj = pan.get("trajectories") or {}
        for k, (n, d) in enumerate(sorted(traj.items())):
            d = np.sort(np.asarray(d, float))
            ax.plot(np.full(d.size, n), d, "o-", color="0.25", ms=3, lw=1,
                    label="trained runs (evaluations)" if k == 0 else None)
        markers = "so^vD<>p*h"
        for k, (r, nd) in enumerate(sorted((pan.get("rounds") or {}).items())):
            pts = np.asarray(nd, float).reshape(-1, 2)
            ax.scatter(pts[:, 0], pts[:, 1], marker=markers[k % len(markers)], s=28, zorder=5,
                       label=f"round {r}")
        if pan.get("frontier") is not None:
            fn, fd = (np.asarray(v, float) for v in pan["frontier"])
            keep = (fn >= n_lo) & (fn <= n_hi) & (fd >= d_lo) & (fd <= d_hi)
            if keep.any():
                ax.plot(fn[keep], fd[keep], color="tab:red", lw=1.5,
                        label="compute-optimal (C = 6ND)")
        if pan.get("budgets") is not None:
            bn, bd = (np.asarray(v, float) for v in pan["budgets"])
            keep = (bn >= n_lo) & (bn <= n_hi) & (bd >= d_lo) & (bd <= d_hi)
            if keep.any():
                ax.scatter(bn[keep], bd[keep], marker="D", color="tab:red", s=22, zorder=4,
                           label="budgets of the table")
        log_scale(ax, "x", "y")
        ax.set_xlim(n_lo, n_hi)
        ax.set_ylim(d_lo, d_hi)
        ax.set_xlabel("non-embedding parameters N")
        ax.set_ylabel("training tokens D")
        ax.set_title(f"{name}: iso-loss L(N, D)", fontsize=9)
        legend(ax, fontsize=6, loc="best")
    _hide_unused(axes, len(names))
    return fig


def plot_bivariate_slices(panels: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> Figure:
    """One row per pair, two panels: loss against N_e at fixed N_d, against N_d at fixed N_e.

    ``panels[pair]["encoder"|"decoder"]``: ``points`` (x, loss, fixed value of the other
    side) and ``curves`` {fixed value: (x grid, predicted loss)} of eq. 2; only the points of a
    series are drawn (all of them, grey, when the side has no series).
    """
    pairs = list(panels)
    fig, axes = new_figure(ncols=2, nrows=max(1, len(pairs)))
    for row, pair in zip(axes, pairs, strict=False):
        for ax, side in zip(row, ("encoder", "decoder"), strict=True):
            pan = panels[pair][side]
            other = "N_d" if side == "encoder" else "N_e"
            x, y, fixed = (np.asarray(v, float) for v in pan["points"])
            keys = sorted(set(pan.get("curves") or {}))
            colors = _colors(keys)
            for f in keys:
                grid, pred = pan["curves"][f]
                ax.plot(grid, pred, color=colors[f], lw=1.2, label=f"{other} = {f:.3g}")
                sel = np.isclose(fixed, f, rtol=1e-9)
                ax.scatter(x[sel], y[sel], color=colors[f], s=20, zorder=3)
            if not keys:  # no series along this side: the points alone, and why
                ax.scatter(x, y, color="0.5", s=14, zorder=2)
                ax.text(0.5, 0.95, f"no two sizes share an {other}", transform=ax.transAxes,
                        ha="center", va="top", fontsize=7, color="0.4")
            log_scale(ax, "x")
            ax.set_xlabel(f"{side} non-embedding parameters {'N_e' if side == 'encoder' else 'N_d'}")
            ax.set_ylabel("test cross-entropy (nats/token)")
            ax.set_title(f"{pair}: {side} scaling at fixed {other} (eq. 2)", fontsize=9)
            ax.grid(alpha=0.3)
            legend(ax, fontsize=6)
    return fig


def plot_fraction_panels(studies: Mapping[str, Mapping[str, Mapping[float, tuple[float, float]]]],
                         curves: Mapping[str, Mapping[str, Callable]] | None = None, *,
                         notes: Mapping[str, str] | None = None, ncols: int = 3) -> Figure:
    """One panel per study: f_i(p) (eq. 10) of each pair with ±1 sd, its f̂ (eq. 12, dashed)
    where given, and f(p) = p (no synergy, no interference); every panel on the same y range.
    ``notes[study]`` is written in its panel (e.g. why it has no f(p))."""
    names = list(studies)
    nc, nr = _grid(ncols, len(names))
    fig, axes = new_figure(ncols=nc, nrows=nr)
    shown = [np.array([0.0, 1.0])]
    for pts in studies.values():
        for d in pts.values():
            v = np.array([d[w][0] for w in d], float)
            e = np.nan_to_num(np.array([d[w][1] for w in d], float))
            shown += [v - e, v + e]
    allv = np.concatenate(shown)
    allv = allv[np.isfinite(allv)]
    pad = 0.05 * (allv.max() - allv.min())
    grid = np.linspace(0.0, 1.0, 101)
    for ax, name in zip(axes.ravel(), names, strict=False):
        ax.plot(grid, grid, color="grey", lw=0.8, ls=":", label="f(p) = p")
        for pair, d in studies[name].items():
            ps = sorted(d)
            v = np.array([d[w][0] for w in ps], float)
            e = np.nan_to_num(np.array([d[w][1] for w in ps], float))
            line = ax.errorbar(ps, v, yerr=e, fmt="o", ms=4, label=pair)
            fn = ((curves or {}).get(name) or {}).get(pair)
            if fn is not None:
                ax.plot(grid[1:], fn(grid[1:]), ls="--", lw=1, color=line[0].get_color())
        note = (notes or {}).get(name)
        if note:
            ax.text(0.03, 0.97, "\n".join(note[i:i + 45] for i in range(0, min(len(note), 180), 45)),
                    transform=ax.transAxes, va="top", fontsize=6, color="tab:red")
        ax.set_ylim(allv.min() - pad, allv.max() + pad)
        ax.set_xlim(-0.05, 1.05)
        _label_panel(ax, "weight p", "effective fraction f(p)", name, legend_size=7)
    _hide_unused(axes, len(names))
    return fig


def _label_panel(ax, xlabel: str, ylabel: str, title: str, *, legend_size: int) -> None:
    """Axis labels, a small title, a light grid and the legend of one panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    legend(ax, fontsize=legend_size)
