"""Figures in the style of the papers (matplotlib ``Figure`` objects, no pyplot state).

* :func:`plot_power_fits`      loss vs N per weight with fitted curves (Fernandes Fig. 2)
* :func:`plot_reducible`       L − L∞ on log-log axes (Fernandes Fig. 3)
* :func:`plot_coefficients`    per-weight α, β, L∞ against p with ±1 sd (Fernandes Fig. 4)
* :func:`plot_joint`           the joint law eq. 7 against the data (Fernandes Fig. 5)
* :func:`plot_fraction`        effective fraction f(p) with f̂ (Fernandes Fig. 6 / 7 left)
* :func:`plot_frontier`        trade-off frontier per size (Fernandes Fig. 7 right / Fig. 8)
* :func:`plot_learning_curves` loss against steps (convergence check, Fernandes App. G)
* :func:`plot_allocation_penalty` α#/α* against N_d/N (Ghorbani Fig. 6)
* :func:`plot_frontier_kpair`  K-pair Pareto set at one size (Fernandes App. H setting)

The figures of the report's other sections (Chen, Caillaut, Ghorbani slices, f(p) side by side)
are in :mod:`fitting.plots.laws`; both draw with the helpers of :mod:`fitting.plots.style`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from fitting.plots.style import legend, log_scale, new_figure, value_colors

if TYPE_CHECKING:  # annotations only: matplotlib is imported lazily
    from matplotlib.figure import Figure

__all__ = [
    "plot_power_fits",
    "plot_reducible",
    "plot_coefficients",
    "plot_joint",
    "plot_fraction",
    "plot_frontier",
    "plot_learning_curves",
    "plot_allocation_penalty",
    "plot_frontier_kpair",
]


def plot_power_fits(data: Mapping[str, Mapping[float, tuple]], fits: Mapping[str, Mapping], *,
                    x_label: str = "non-embedding parameters N", title: str = "") -> Figure:
    """One panel per pair: points per weight p, fitted β N^−α + L∞ per weight (Fernandes Fig. 2).

    ``data[pair][p] = (n, loss)``; ``fits[pair][p]`` = a PowerLawFit or None.
    """
    pairs = list(data)
    fig, axes = new_figure(ncols=max(1, len(pairs)))
    for ax, pair in zip(axes[0], pairs, strict=False):
        colors = value_colors(list(data[pair]))
        for p, (n, y) in sorted(data[pair].items()):
            ax.scatter(n, y, color=colors[p], s=18, label=f"p={p:g}", zorder=3)
            fit = fits.get(pair, {}).get(p)
            if fit is not None:
                grid = np.geomspace(np.min(n) / 1.5, np.max(n) * 1.5, 100)
                ax.plot(grid, fit.predict(grid), color=colors[p], lw=1.2)
        log_scale(ax, "x")
        ax.set_xlabel(x_label)
        ax.set_ylabel("test cross-entropy (nats/token)")
        ax.set_title(f"{pair}: L(N) per weight (eq. 6)")
        ax.grid(alpha=0.3)
        legend(ax, fontsize=7, ncols=2)
    if title:
        fig.suptitle(title)
    return fig


def plot_reducible(data: Mapping[str, Mapping[float, tuple]], l_inf: Mapping[str, float], *,
                   curves: Mapping[str, Mapping[float, callable]] | None = None) -> Figure:
    """log-log plot of L − L∞ per weight, L∞ from the joint law (Fernandes Fig. 3)."""
    pairs = list(data)
    fig, axes = new_figure(ncols=max(1, len(pairs)))
    for ax, pair in zip(axes[0], pairs, strict=False):
        colors = value_colors(list(data[pair]))
        li = l_inf.get(pair, 0.0)
        for p, (n, y) in sorted(data[pair].items()):
            r = np.asarray(y) - li
            ok = r > 0
            ax.scatter(np.asarray(n)[ok], r[ok], color=colors[p], s=18, label=f"p={p:g}")
            fn = (curves or {}).get(pair, {}).get(p)
            if fn is not None:
                grid = np.geomspace(np.min(n) / 1.5, np.max(n) * 1.5, 50)
                ax.plot(grid, fn(grid) - li, color=colors[p], lw=1.0)
        log_scale(ax, "x", "y")
        ax.set_xlabel("N")
        ax.set_ylabel(f"L − L∞ (L∞={li:.3f})")
        ax.set_title(f"{pair}: reducible loss")
        ax.grid(alpha=0.3, which="both")
        legend(ax, fontsize=7, ncols=2)
    return fig


def plot_coefficients(coefs: Mapping[str, Mapping[float, tuple[dict, dict | None]]],
                      joint: Mapping[str, dict] | None = None) -> Figure:
    """α, β, L∞ per weight with ±1 sd bands; dashed: the joint-law values (Fernandes Fig. 4).

    ``coefs[pair][p] = (params, stderr)``; ``joint[pair] = {"alpha":…, "l_inf":…}``. On the log
    β panel the band is β·e^(±sd/β) (±1 sd of log β), cut at 4× beyond the values.
    """
    pairs = list(coefs)
    names = ["alpha", "beta", "l_inf"]
    fig, axes = new_figure(ncols=3, nrows=max(1, len(pairs)), size=(3.3, 2.7))
    for r, pair in enumerate(pairs):
        ps = sorted(coefs[pair])
        for c, name in enumerate(names):
            ax = axes[r][c]
            v = np.array([coefs[pair][p][0][name] for p in ps])
            sd = np.array([(coefs[pair][p][1] or {}).get(name, np.nan) for p in ps])
            (line,) = ax.plot(ps, v, "o-", ms=4)
            lo, hi = v - sd, v + sd
            if name == "beta":  # ±1 sd of log β (delta method): v·e^(±sd/v) stays > 0
                with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                    lo, hi = v * np.exp(-sd / v), v * np.exp(sd / v)
            _bands(ax, np.asarray(ps, float), lo, hi, color=line.get_color())
            if joint and pair in joint and name in joint[pair]:
                ax.axhline(joint[pair][name], ls="--", color="k", lw=1)
            if name == "beta":
                log_scale(ax, "y")
                _clip_log_view(ax, v, lo, hi)
            ax.set_xlabel(f"weight p of {pair}")
            ax.set_title({"alpha": "α", "beta": "β", "l_inf": "L∞"}[name] + f" ({pair})")
            ax.grid(alpha=0.3)
    return fig


def _bands(ax, x: np.ndarray, lo: np.ndarray, hi: np.ndarray, color) -> None:
    """A shaded band from ``lo`` to ``hi`` over each run of weights where both are finite, so a
    weight without a standard deviation shows as a gap (not bridged, no NaN handed to
    matplotlib); a lone weight gets a vertical bar."""
    ok = np.isfinite(lo) & np.isfinite(hi)
    start = 0
    while start < len(x):
        if not ok[start]:
            start += 1
            continue
        end = start
        while end + 1 < len(x) and ok[end + 1]:
            end += 1
        run = slice(start, end + 1)
        if end > start:
            ax.fill_between(x[run], lo[run], hi[run], color=color, alpha=0.25, lw=0)
        else:
            ax.vlines(x[start], lo[start], hi[start], color=color, alpha=0.25, lw=4)
        start = end + 1


def _clip_log_view(ax, v: np.ndarray, lo: np.ndarray, hi: np.ndarray, factor: float = 4.0) -> None:
    """y limits of a log panel: the values ``v`` and their band, but the band cut at ``factor``
    beyond the values. A standard deviation larger than the value (β of a pair whose loss barely
    moves with N) spans decades; on a log axis it would set the scale and flatten the values,
    so the band runs off the panel instead."""
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return
    band = np.concatenate([lo, hi, v])
    band = band[np.isfinite(band) & (band > 0)]
    bottom = max(float(band.min()), float(v.min()) / factor)
    top = min(float(band.max()), float(v.max()) * factor)
    ax.set_ylim(bottom / 1.15, top * 1.15)


def plot_joint(data: Mapping[str, Mapping[float, tuple]],
               predict: Callable[[str, float, np.ndarray], np.ndarray],
               pairs: Sequence[str]) -> Figure:
    """Data against the joint law eq. 7 per weight (Fernandes Fig. 5).

    ``predict(pair, p, n_grid)`` returns the law's loss.
    """
    fig, axes = new_figure(ncols=max(1, len(pairs)))
    for ax, pair in zip(axes[0], pairs, strict=False):
        colors = value_colors(list(data[pair]))
        for p, (n, y) in sorted(data[pair].items()):
            ax.scatter(n, y, color=colors[p], s=18, label=f"p={p:g}")
            grid = np.geomspace(np.min(n) / 1.5, np.max(n) * 1.5, 100)
            try:
                ax.plot(grid, predict(pair, p, grid), color=colors[p], lw=1.2, ls="--")
            except Exception:  # weight without a β (e.g. zero-shot): points only
                pass
        log_scale(ax, "x")
        ax.set_xlabel("N")
        ax.set_ylabel("test cross-entropy")
        ax.set_title(f"{pair}: joint law (eq. 7)")
        ax.grid(alpha=0.3)
        legend(ax, fontsize=7, ncols=2)
    return fig


def plot_fraction(points: Mapping[str, Mapping[float, tuple[float, float]]],
                  curves: Mapping[str, callable] | None = None, *, title: str = "") -> Figure:
    """Effective fraction f_i(p) (eq. 10) with error bars; f̂ (eq. 12/13) as a dashed line.

    The y axis covers [0, 1] and the points with their error bars; an f̂ curve outside that
    runs off the panel instead of setting the scale."""
    fig, axes = new_figure()
    ax = axes[0][0]
    grid = np.linspace(0.0, 1.0, 101)
    ax.plot(grid, grid, color="grey", lw=0.8, ls=":", label="f(p) = p")
    shown = [np.array([0.0, 1.0])]
    for pair, pts in points.items():
        ps = sorted(pts)
        v = np.array([pts[p][0] for p in ps])
        e = np.array([pts[p][1] for p in ps])
        e = np.where(np.isfinite(e), e, 0)
        line = ax.errorbar(ps, v, yerr=e, fmt="o", ms=4, label=pair)
        shown += [v - e, v + e]
        fn = (curves or {}).get(pair)
        if fn is not None:
            ax.plot(grid[1:], fn(grid[1:]), ls="--", color=line[0].get_color(), lw=1)
    shown = np.concatenate(shown)
    shown = shown[np.isfinite(shown)]
    pad = 0.05 * (shown.max() - shown.min())
    ax.set_ylim(shown.min() - pad, shown.max() + pad)
    ax.set_xlim(-0.05, 1.05)
    ax.set_xlabel("weight p")
    ax.set_ylabel("effective fraction f(p) = N_eff / N")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    legend(ax, fontsize=8)
    return fig


def plot_frontier(frontiers: Mapping[float, tuple[np.ndarray, np.ndarray]], pairs: Sequence[str], *,
                  observed: Mapping[float, tuple[np.ndarray, np.ndarray]] | None = None,
                  bands: Mapping[float, tuple] | None = None, metric: str = "loss") -> Figure:
    """Trade-off frontier L_1 vs L_2 per model size (Fernandes Fig. 7 right; Fig. 8 in ChrF)."""
    from matplotlib import colormaps  # lazy, as in new_figure

    fig, axes = new_figure()
    ax = axes[0][0]
    cm = colormaps["plasma"]
    sizes = sorted(frontiers)
    for j, n in enumerate(sizes):
        col = cm(0.1 + 0.75 * j / max(1, len(sizes) - 1))
        a, b = frontiers[n]
        ax.plot(a, b, ls="--", color=col, label=f"N={n:.3g}")
        if bands and n in bands:
            (alo, ahi), (blo, bhi) = bands[n]
            ax.fill_betweenx(b, alo, ahi, color=col, alpha=0.12, lw=0)
        if observed and n in observed:
            ax.scatter(*observed[n], color=col, s=16, zorder=3)
    ax.set_xlabel(f"{metric} {pairs[0]}")
    ax.set_ylabel(f"{metric} {pairs[1]}")
    _frontier_limits(ax, frontiers, observed, higher_is_better=metric.lower() != "loss")
    ax.grid(alpha=0.3)
    legend(ax, fontsize=7)
    ax.set_title("predicted trade-off frontier (eq. 11)")
    return fig


def _frontier_limits(ax, frontiers: Mapping[float, tuple[np.ndarray, np.ndarray]],
                     observed: Mapping[float, tuple[np.ndarray, np.ndarray]] | None,
                     higher_is_better: bool, margin: float = 0.25) -> None:
    """Axes over the part of the frontier a reader compares: from its best value to the worst
    observed run's, widened by ``margin`` of that distance on both sides (with no runs: from
    the best value to the curves' median); near p = 0 or 1 the eq. 11 prediction runs off
    without bound and would otherwise set the scale, so its arms leave the panel."""
    for axis, set_lim in ((0, ax.set_xlim), (1, ax.set_ylim)):
        curve = np.concatenate([np.asarray(v[axis], float).ravel() for v in frontiers.values()]
                               or [np.empty(0)])
        seen = np.concatenate([np.asarray(v[axis], float).ravel() for v in (observed or {}).values()]
                              or [np.empty(0)])
        curve, seen = curve[np.isfinite(curve)], seen[np.isfinite(seen)]
        values = np.concatenate([curve, seen])
        if values.size == 0:
            continue
        sign = -1.0 if higher_is_better else 1.0  # work in "lower is better" units
        best = float(np.min(sign * values))
        worst = float(np.max(sign * seen)) if seen.size else float(np.quantile(sign * curve, 0.5))
        span = worst - best
        if not span > 0:
            continue
        low, high = sorted((sign * (best - margin * span), sign * (worst + margin * span)))
        set_lim(low, high)


def plot_learning_curves(curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
                         fits: Mapping[str, callable] | None = None, title: str = "", *,
                         panels: Mapping[str, tuple[str, float]] | None = None,
                         cooldown_step: float | None = None,
                         ends: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None
                         ) -> Figure:
    """Loss against training step per run (log-log), with extrapolated curves (App. G).

    With ``panels`` (label → (panel name, model size N)), one panel per name (e.g. per pair),
    each curve coloured by its size on a viridis scale with one legend entry per size, as
    Fernandes et al. colour their figures; curves without an entry are left out. Without it, one
    panel with a legend when there are at most 12 curves. ``cooldown_step`` draws a dotted
    vertical line where the learning rate starts its cool-down. ``ends`` (label → (steps, losses))
    draws the final losses of a curve's cool-down branches (Hägele et al. 2024) as triangles in
    the curve's colour.
    """
    if panels is None:
        groups = {"": list(curves)}
        size_of: dict[str, float] = {}
    else:
        groups = {}
        for label in curves:
            if label in panels:
                groups.setdefault(panels[label][0], []).append(label)
        size_of = {label: float(n) for label, (_, n) in panels.items()}
    names = sorted(groups) or [""]
    fig, axes = new_figure(ncols=len(names), size=(4.6, 3.6))
    sizes = sorted(set(size_of.values()))
    positions = [i / max(1, len(sizes) - 1) for i in range(len(sizes))]
    colors = value_colors(positions)
    color_of = {n: colors[x] for n, x in zip(sizes, positions, strict=True)}
    for ax, name in zip(axes[0], names, strict=True):
        labelled: set[float | str] = set()
        for label in groups.get(name, []):
            s, y = curves[label]
            n = size_of.get(label)
            kwargs = {"lw": 1}
            if n is not None:
                kwargs.update(color=color_of[n], alpha=0.8)
                if n not in labelled:
                    kwargs["label"] = f"N={n:.3g}"
                    labelled.add(n)
            elif len(curves) <= 12:
                kwargs["label"] = label
            line = ax.plot(s, y, **kwargs)
            if ends and label in ends:
                ax.scatter(*ends[label], marker="v", s=16, color=line[0].get_color(), zorder=3,
                           label=None if "ends" in labelled else "cool-down branch end")
                labelled.add("ends")
            fn = (fits or {}).get(label)
            if fn is not None:
                grid = np.geomspace(np.max(s) / 4, np.max(s) * 8, 60)
                ax.plot(grid, fn(grid), ls=":", color=line[0].get_color())
        if cooldown_step:
            ax.axvline(cooldown_step, ls=":", color="0.4", lw=1, label="cool-down starts")
        log_scale(ax, "x", "y")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss" + (f" {name}" if name else ""))
        ax.grid(alpha=0.3, which="both")
        legend(ax, fontsize=6)
        if name or title:
            ax.set_title(" — ".join(t for t in (name, title) if t), fontsize=9)
    return fig


def plot_allocation_penalty(ratios: np.ndarray, penalties: Mapping[str, np.ndarray],
                            optimum: Mapping[str, float] | None = None) -> Figure:
    """α#/α* against the decoder fraction N_d/N (Ghorbani Fig. 6 left)."""
    fig, axes = new_figure()
    ax = axes[0][0]
    for label, pen in penalties.items():
        line = ax.plot(ratios, pen, label=label)
        if optimum and label in optimum:
            ax.axvline(optimum[label], ls=":", color=line[0].get_color())
    ax.set_xlabel("decoder fraction N_d / N")
    ax.set_ylabel("α# / α*")
    ax.grid(alpha=0.3)
    legend(ax, fontsize=8)
    return fig


def plot_frontier_kpair(values: np.ndarray, pareto: np.ndarray, pairs: Sequence[str], *,
                        metric: str = "loss", title: str = "") -> Figure:
    """K-pair trade-off at one size: Pareto-efficient weightings in the (pair 1, pair 2) plane,
    coloured by pair 3 (grey: dominated weightings)."""
    fig, axes = new_figure(size=(5.0, 3.8))
    ax = axes[0][0]
    ax.scatter(values[~pareto, 0], values[~pareto, 1], s=6, color="0.8", label="dominated")
    sc = ax.scatter(values[pareto, 0], values[pareto, 1], s=14, c=values[pareto, 2],
                    cmap="viridis", label="Pareto-efficient")
    fig.colorbar(sc, ax=ax, label=f"{metric} {pairs[2]}")
    ax.set_xlabel(f"{metric} {pairs[0]}")
    ax.set_ylabel(f"{metric} {pairs[1]}")
    ax.grid(alpha=0.3)
    legend(ax, fontsize=7)
    if title:
        ax.set_title(title)
    return fig
