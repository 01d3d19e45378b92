"""Synthetic study data with known ground truth, and a checker of figures, for tests and
benchmarks of :mod:`fitting`.

Shipped in the package (as ``seqio/test_utils.py`` is) so that ``tests/fitting`` and the
``benchmarks/`` scripts share it. A two-pair study (en-de, en-zh) follows the joint law with
effective parameters, L_i(N; p) = β_i (f̂_i(p) N)^−α_i + L∞_i (Fernandes eq. 7/9) with the
f̂ of eq. 12; :data:`TRUTH` holds its parameters. :func:`check_figure` lists what is wrong
with a matplotlib figure that a reader would see: non-finite data, axes scaled far beyond the
data, several labelled series without a legend. For the K-pair mixture laws,
:func:`known_truth_mixture_runs` draws runs of five pairs from a law of known parameters
(:func:`transfer_truth`: two related pairs, one interfering, an isolate; :func:`datamixing_truth`).
For the curve laws, :func:`family_schedules` gives the learning-rate schedules of one run shaped
like the main job's and of its cool-down branches (:data:`SCHEDULE_STEPS` …).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

__all__ = [
    "TRUTH",
    "WEIGHTS",
    "f_hat",
    "true_loss",
    "make_final_table",
    "make_curves_table",
    "write_run_dirs",
    "LINEAR_SPAN_FACTOR",
    "LOG_MARGIN_FACTOR",
    "BULK_FRACTION",
    "check_figure",
    "MIXTURE_PAIRS",
    "MIXTURE_SIZES",
    "MIXTURE_TAU",
    "transfer_truth",
    "datamixing_truth",
    "known_truth_mixture_runs",
    "SCHEDULE_STEPS",
    "SCHEDULE_WARMUP",
    "SCHEDULE_COOLDOWN",
    "SCHEDULE_BRANCHES",
    "schedule_rate",
    "logged_steps",
    "ScheduledRun",
    "family_schedules",
]

#: pair -> (alpha, beta_1, l_inf, (c1, c2, c3) of f̂ eq. 12)
TRUTH: dict[str, tuple[float, float, float, tuple[float, float, float]]] = {
    "en-de": (0.30, 30.0, 1.00, (0.10, 2.0, 1.0)),
    "en-zh": (0.40, 60.0, 1.50, (0.05, 1.5, 1.5)),
}
#: the two-pair weight grid of a study (weight of en-de; en-zh gets 1 − p)
WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


def f_hat(p: ArrayLike, c1: float, c2: float, c3: float) -> np.ndarray:
    """Effective fraction of parameters f̂(p) = p + c1 p^c2 (1 − p)^c3 (Fernandes eq. 12)."""
    p = np.asarray(p, dtype=float)
    return p + c1 * p**c2 * (1 - p) ** c3


def true_loss(pair: str, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """The noiseless loss of ``pair`` at size ``n`` and weight ``p`` (eq. 7 with f̂ of eq. 12)."""
    a, b1, li, c = TRUTH[pair]
    return b1 * (f_hat(p, *c) * np.asarray(n, float)) ** -a + li


def make_final_table(sizes: ArrayLike | None = None, weights: Sequence[float] = WEIGHTS,
                     noise: float = 0.01, seed: int = 0,
                     zero_shot_loss: float = 6.0) -> pd.DataFrame:
    """Final losses of a 2-pair study: one row per (size, weight of en-de, pair).

    Tidy-table columns; values are :func:`true_loss` times (1 + ``noise``·ε), ε standard
    normal; a pair with weight 0 gets ``zero_shot_loss``. Default sizes: 8 from 2e5 to 2e7.
    """
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(2e5, 2e7, 8) if sizes is None else np.asarray(sizes, float)
    rows = []
    for p in weights:
        for j, n in enumerate(sizes):
            run = f"s{j}_p{p:.2f}"
            for pair, pp in (("en-de", p), ("en-zh", 1.0 - p)):
                pp = round(pp, 10)
                loss = true_loss(pair, n, pp) if pp > 0 else zero_shot_loss
                rows.append(dict(run_id=run, study="t", family="mini", size=f"s{j}", n=int(n),
                                 n_enc=int(n) // 2, n_dec=int(n) - int(n) // 2, pair=pair,
                                 weight=pp, data_size=np.nan, eval_set="validation",
                                 metric="loss", step=1000, tokens=1000 * 512,
                                 value=loss * (1 + noise * rng.standard_normal()), final=True))
    return pd.DataFrame(rows)


def make_curves_table(final: pd.DataFrame, steps: Sequence[int] = (100, 200, 400, 600, 800, 1000),
                      drop: float = 0.5, rate: float = 0.5) -> pd.DataFrame:
    """Add learning-curve rows: value(t) = final + drop·((t/T)^−rate − 1); final rows unchanged."""
    rows = []
    T = max(steps)
    for _, r in final.iterrows():
        for s in steps:
            d = r.to_dict()
            d["step"] = s
            d["final"] = s == T
            d["value"] = r["value"] + drop * ((s / T) ** -rate - 1.0)
            rows.append(d)
    return pd.DataFrame(rows)


def write_run_dirs(final: pd.DataFrame, root: str) -> list[str]:
    """Write run.json + metrics.jsonl run directories (metrics schema v1) for the final table.

    One directory per ``run_id`` under ``root``; each pair gets loss rows at steps 500 (value
    ×1.2) and 1000 (the table's value), plus one ``train_loss`` row. Returns the directories.
    """
    dirs = []
    for run, g in final.groupby("run_id"):
        d = os.path.join(root, str(run))
        os.makedirs(d, exist_ok=True)
        first = g.iloc[0]
        meta = {
            "schema_version": 1, "run_id": run, "study": "t", "status": "finished",
            "model": {"family": "mini", "size": first["size"], "config": {},
                      "params": {"total": int(first["n"]) + 1000, "embedding": 1000,
                                 "non_embedding": int(first["n"]), "encoder": int(first["n_enc"]),
                                 "decoder": int(first["n_dec"])}, "vocab_size": 100},
            "mixture": {"name": "m", "weights": {r.pair: float(r.weight) for r in g.itertuples()},
                        "caps": {r.pair: None for r in g.itertuples()}, "tasks": {}},
            "training": {"steps": 1000, "batch_size": 8, "batch_tokens": 512,
                         "feature_lengths": {"inputs": 64, "targets": 64}, "seed": 0},
        }
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(meta, f)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            for r in g.itertuples():
                for step, scale in ((500, 1.2), (1000, 1.0)):
                    f.write(json.dumps({"run_id": run, "step": step, "tokens": step * 512,
                                        "task": r.pair, "eval_set": "validation",
                                        "metric": "loss", "value": r.value * scale}) + "\n")
            f.write(json.dumps({"run_id": run, "step": 1000, "tokens": 512000, "task": "all",
                                "eval_set": "train", "metric": "train_loss", "value": 2.0}) + "\n")
        dirs.append(d)
    return dirs


# --- figure checks -------------------------------------------------------------------------------

#: A linear axis may span at most this many times the data it shows. Autoscaling adds 5 %
#: margins (1.1×) and a hand-set range a little more; at ten times the data fill a tenth of the
#: panel and read as a flat line.
LINEAR_SPAN_FACTOR = 10.0
#: A log axis may reach at most this factor beyond the data on either side: one empty decade.
LOG_MARGIN_FACTOR = 10.0
#: The data's extent for both limits above is the shortest interval that holds this fraction of
#: the plotted values, so that a few runaway points (a law evaluated where it diverges) cannot
#: stretch an axis over the rest of the data unnoticed.
BULK_FRACTION = 0.9


def check_figure(fig, name: str = "figure") -> list[str]:
    """What a reader of ``fig`` (a matplotlib Figure) would find wrong; ``[]`` when nothing.

    Every panel (colorbars aside) is checked for:

    * non-finite data: points of lines, scatter offsets, polygon vertices; a ``fill_between``
      band broken into pieces or empty, and error bars missing (matplotlib silently drops the
      non-finite parts of both);
    * axis limits far from the data: a linear axis spanning more than :data:`LINEAR_SPAN_FACTOR`
      times the plotted values, or a log axis reaching more than :data:`LOG_MARGIN_FACTOR`
      beyond them, the values' extent being the shortest interval holding
      :data:`BULK_FRACTION` of them, every plotted series (a line, a scatter, a band) weighing
      the same however densely it is sampled; a view that holds none of them; values ≤ 0 on a
      log axis (not drawn);
    * tick labels of one axis that overlap one another (the figure is drawn once to place them);
    * two or more labelled series with neither a legend nor a colorbar;
    * a visible panel with nothing drawn and no note.

    Each problem is one line that starts with ``name`` and the panel.
    """
    from matplotlib.container import ErrorbarContainer  # lazy: fitting never imports matplotlib

    colorbar_axes, with_colorbar = set(), set()
    for ax in fig.axes:
        for mappable in (*ax.collections, *ax.images):
            colorbar = getattr(mappable, "colorbar", None)
            if colorbar is not None:
                colorbar_axes.add(colorbar.ax)
                with_colorbar.add(ax)
    panels = [ax for ax in fig.axes if ax not in colorbar_axes]
    if not panels:
        return [f"{name}: no axes"]
    fig.draw_without_rendering()  # tick labels get their text and place
    problems = []
    for i, ax in enumerate(panels):
        if not ax.get_visible():
            continue
        where = f"{name}: panel {i + 1}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        error_bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        for container in error_bars:
            problems += [f"{where}: {p}" for p in _missing_error_bars(container)]
        found, values = _panel_values(ax, bars={id(b) for c in error_bars for b in c.lines[2]})
        problems += [f"{where}: {p}" for p in found]
        for axis in ("x", "y"):
            problems += [f"{where}: {p}" for p in _limit_problems(ax, axis, values[axis])]
            problems += [f"{where}: {p}" for p in _overlapping_tick_labels(ax, axis)]
        labels = set(ax.get_legend_handles_labels()[1])
        if (len(labels) > 1 and ax.get_legend() is None and not fig.legends
                and ax not in with_colorbar):
            problems.append(f"{where}: {len(labels)} labelled series ({', '.join(sorted(labels))})"
                            " but no legend or colorbar")
        if not any(v.size for v in (*values["x"], *values["y"])) and not ax.texts \
                and not ax.images:
            problems.append(f"{where}: nothing is drawn and no note says why")
    return problems


def _describe(artist, kind: str, k: int) -> str:
    label = artist.get_label()
    return f"{kind} {label!r}" if label and not label.startswith("_") else f"{kind} #{k + 1}"


def _panel_values(ax, bars: set[int]) -> tuple[list[str], dict[str, list[np.ndarray]]]:
    """Non-finite data in ``ax``, and its finite plotted values per axis (data coordinates);
    ``bars`` (ids of error-bar collections, checked by :func:`_missing_error_bars`) give values
    only."""
    from matplotlib import collections
    from matplotlib.path import Path

    problems: list[str] = []
    values: dict[str, list[np.ndarray]] = {"x": [], "y": []}

    def take(points: np.ndarray, data_axes: tuple[bool, bool], what: str | None) -> None:
        points = np.asarray(points, float).reshape(-1, 2)
        bad = ~np.isfinite(points).all(axis=1)
        if bad.any() and what:
            problems.append(f"{what}: {int(bad.sum())} of {len(points)} points are not finite")
        for axis, column, is_data in (("x", 0, data_axes[0]), ("y", 1, data_axes[1])):
            if is_data:
                values[axis].append(points[~bad, column])

    for k, line in enumerate(ax.get_lines()):
        if line.get_visible():
            take(line.get_xydata(), line.get_transform().contains_branch_seperately(ax.transData),
                 _describe(line, "line", k))
    band_type = getattr(collections, "FillBetweenPolyCollection", None)  # matplotlib ≥ 3.10
    for k, coll in enumerate(ax.collections):
        if not coll.get_visible():
            continue
        what = None if id(coll) in bars else _describe(coll, type(coll).__name__, k)
        offset_axes = coll.get_offset_transform().contains_branch_seperately(ax.transData)
        if any(offset_axes):  # scatter: markers placed at data offsets
            offsets = np.ma.filled(np.ma.asarray(coll.get_offsets(), dtype=float), np.nan)
            take(offsets, offset_axes, what)
        path_axes = coll.get_transform().contains_branch_seperately(ax.transData)
        if any(path_axes):  # polygons and segments drawn in data coordinates
            paths = coll.get_paths()
            vertices = [p.vertices if p.codes is None else p.vertices[p.codes != Path.CLOSEPOLY]
                        for p in paths]
            take(np.concatenate(vertices) if vertices else np.empty((0, 2)), path_axes, what)
            if band_type is not None and isinstance(coll, band_type) and len(paths) != 1:
                problems.append(f"{what}: the band is in {len(paths)} pieces (non-finite bounds "
                                "are left out of a fill_between)")
    return problems, values


def _missing_error_bars(container) -> list[str]:
    data_line, _, bar_collections = container.lines
    if data_line is None:
        return []
    points = np.asarray(data_line.get_xydata(), float)
    shown = int(np.isfinite(points).all(axis=1).sum())
    out = []
    for bars in bar_collections:
        drawn = sum(1 for s in bars.get_segments() if len(s) and np.isfinite(s).all())
        if drawn < shown:
            out.append(f"error bars of {_describe(container, 'series', 0)}: {shown - drawn} of "
                       f"{shown} are missing (non-finite errors are not drawn)")
    return out


def _bulk(v: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """The shortest interval holding :data:`BULK_FRACTION` of the total weight ``w`` of the
    sorted values ``v`` (two pointers over the cumulative weight)."""
    cum = np.concatenate([[0.0], np.cumsum(w)])
    need = BULK_FRACTION * cum[-1] * (1 - 1e-12)
    best, j = (float(v[0]), float(v[-1])), 0
    for i in range(v.size):
        j = max(j, i)
        while j < v.size and cum[j + 1] - cum[i] < need:
            j += 1
        if j == v.size:
            break
        if v[j] - v[i] < best[1] - best[0]:
            best = (float(v[i]), float(v[j]))
    return best


def _weighted(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """All values of ``parts`` sorted, each part (one plotted series) weighing the same in
    total: a frontier sampled at 200 weights does not outweigh the 8 runs scattered beside it."""
    parts = [np.asarray(p, float) for p in parts if np.size(p)]
    if not parts:
        return np.empty(0), np.empty(0)
    v = np.concatenate(parts)
    w = np.concatenate([np.full(p.size, 1.0 / p.size) for p in parts])
    order = np.argsort(v, kind="stable")
    return v[order], w[order]


def _limit_problems(ax, axis: str, parts: list[np.ndarray]) -> list[str]:
    v, w = _weighted(parts)
    if v.size == 0:
        return []
    scale = ax.get_xscale() if axis == "x" else ax.get_yscale()
    lo, hi = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    if scale == "log":
        out = []
        if (v <= 0).any():
            out.append(f"{axis} axis (log): {int((v <= 0).sum())} of {v.size} plotted values are "
                       "≤ 0 and not drawn")
        w, v = w[v > 0], v[v > 0]
        if v.size == 0:
            return out
        blo, bhi = _bulk(np.log10(v), w)
        blo, bhi = 10.0**blo, 10.0**bhi
        if lo < blo / LOG_MARGIN_FACTOR or hi > bhi * LOG_MARGIN_FACTOR:
            out.append(f"{axis} axis (log) shows [{lo:.3g}, {hi:.3g}], more than a factor "
                       f"{LOG_MARGIN_FACTOR:g} beyond [{blo:.3g}, {bhi:.3g}], where "
                       f"{BULK_FRACTION:.0%} of the plotted values lie")
    elif scale == "linear":
        out = []
        blo, bhi = _bulk(v, w)
        span = bhi - blo
        if span <= 0:  # one value: matplotlib shows ±5 % of it (or ±0.055 around 0)
            span = 0.1 * abs(blo) or 1.0
        if hi - lo > LINEAR_SPAN_FACTOR * span:
            out.append(f"{axis} axis shows [{lo:.3g}, {hi:.3g}], {(hi - lo) / span:.3g}× the span "
                       f"of [{blo:.3g}, {bhi:.3g}], where {BULK_FRACTION:.0%} of the plotted "
                       f"values lie (at most {LINEAR_SPAN_FACTOR:g}×)")
    else:  # symlog, logit, custom scales: not judged
        return []
    if hi < blo or lo > bhi:
        out.append(f"{axis} axis shows [{lo:.3g}, {hi:.3g}], none of the plotted values "
                   f"([{blo:.3g}, {bhi:.3g}])")
    return out


def _overlapping_tick_labels(ax, axis: str) -> list[str]:
    """Pairs of neighbouring tick labels (major and minor, inside the view) that overlap."""
    which = ax.xaxis if axis == "x" else ax.yaxis
    lo, hi = sorted(which.get_view_interval())
    tol = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    labels = []
    for tick in (*which.get_major_ticks(), *which.get_minor_ticks()):
        for text in (tick.label1, tick.label2):
            if (text.get_visible() and text.get_text().strip()
                    and lo - tol <= tick.get_loc() <= hi + tol):
                labels.append((tick.get_loc(), text))
    labels.sort(key=lambda item: item[0])
    pairs = [(a, b) for (_, a), (_, b) in zip(labels, labels[1:], strict=False)
             if a.get_window_extent().overlaps(b.get_window_extent())]
    if not pairs:
        return []
    more = f" (and {len(pairs) - 1} more pairs)" if len(pairs) > 1 else ""
    a, b = pairs[0]
    return [f"{axis} tick labels overlap: {_plain(a.get_text())!r} and {_plain(b.get_text())!r}"
            + more]


def _plain(tex: str) -> str:
    """A tick label's mathtext as plain text (``$\\mathdefault{2\\times10^{4}}$`` → ``2×10^4``)."""
    for old, new in (("$", ""), ("\\mathdefault", ""), ("\\times", "×"), ("{", ""), ("}", ""),
                     ("\\minus", "−")):
        tex = tex.replace(old, new)
    return tex


#: five pairs of the K-pair known truth, its sizes N, and the transfer matrix τ of
#: :func:`transfer_truth`: en-x0/en-x1 related, en-x4 interferes with en-x3, en-x2 an isolate
MIXTURE_PAIRS: list[str] = [f"en-x{i}" for i in range(5)]
MIXTURE_SIZES: list[float] = [1e7, 3e7, 1e8]
MIXTURE_TAU = np.zeros((5, 5))
MIXTURE_TAU[0, 1], MIXTURE_TAU[1, 0] = 0.6, 0.5
MIXTURE_TAU[3, 4] = -0.2


def transfer_truth():
    """A `transfer` mixture law (Fernandes eq. 11 with τ = :data:`MIXTURE_TAU`) of known
    parameters for :data:`MIXTURE_PAIRS`."""
    from fitting.laws.mixture.laws import MixtureLawFit  # noqa: PLC0415

    k = len(MIXTURE_PAIRS)
    sol = {}
    for i, p in enumerate(MIXTURE_PAIRS):
        oth = [j for j in range(k) if j != i]
        sol[p] = {"theta": [0.3 + 0.02 * i] + list(MIXTURE_TAU[i, oth]),
                  "coef": [0.6 + 0.1 * i, 1.0 + 0.1 * i], "f_scale": 0.01}
    return MixtureLawFit(law="mixture", params={}, form="transfer", pairs=MIXTURE_PAIRS,
                         sizes=MIXTURE_SIZES, n_ref=3e7, solutions=sol)


def datamixing_truth():
    """A `datamixing` law (Ye et al. 2024, per size) of seeded random parameters."""
    from fitting.laws.mixture.laws import MixtureLawFit  # noqa: PLC0415

    rng = np.random.default_rng(3)
    sol = {}
    for i, p in enumerate(MIXTURE_PAIRS):
        for s in range(len(MIXTURE_SIZES)):
            sol[f"{p}@{s}"] = {"theta": list(rng.uniform(0.5, 2.5, len(MIXTURE_PAIRS) - 1)),
                               "coef": [1.0 + 0.1 * i - 0.1 * s, 0.3], "f_scale": 0.02}
    return MixtureLawFit(law="mixture", params={}, form="datamixing", pairs=MIXTURE_PAIRS,
                         sizes=MIXTURE_SIZES, n_ref=3e7, solutions=sol)


def known_truth_mixture_runs(truth, noise: float = 0.002, n_mix: int = 9,
                             concentration: float = 2.0):
    """Runs of ``truth`` (its pairs, at its sizes): the uniform mixture and ``n_mix`` Dirichlet
    mixtures of ``concentration`` at every size, two held-out mixtures at the largest, losses
    with relative Gaussian noise of sd ``noise`` (seeded)."""
    from fitting.data.sampling import dirichlet_mixtures  # noqa: PLC0415
    from fitting.laws.mixture.fit import MixtureRuns  # noqa: PLC0415

    pairs, sizes = list(truth.pairs), list(truth.sizes)
    k = len(pairs)
    Wd = np.vstack([np.full((1, k), 1 / k),
                    dirichlet_mixtures(k, n_mix, seed=1, concentration=concentration)])
    Wh = dirichlet_mixtures(k, 2, seed=7, concentration=concentration)
    n = np.concatenate([np.repeat(sizes, len(Wd)), [sizes[-1]] * 2])
    W = np.vstack([np.tile(Wd, (len(sizes), 1)), Wh])
    rng = np.random.default_rng(0)
    Y = truth.predict(n, W) * (1 + noise * rng.standard_normal((len(n), k)))
    held = np.zeros(len(n), bool)
    held[-2:] = True
    return MixtureRuns(pairs, [f"r{j}" for j in range(len(n))], n, W, Y,
                       np.full(Y.shape, np.nan), held)


# -- the main job's schedule in miniature, for the curve laws' tests --------------------------
#: steps of a parent run; its warm-up; its linear cool-down (the last 20 %)
SCHEDULE_STEPS, SCHEDULE_WARMUP, SCHEDULE_COOLDOWN = 1000, 100, 200
#: cool-down branches: {branch step: last step}, each cooling down over 10 % of its length
SCHEDULE_BRANCHES = {450: 500, 600: 667, 750: 833}


def schedule_rate(s: ArrayLike, end: int, cooldown: int) -> np.ndarray:
    """The training stack's rate of update s: rsqrt(max(s, w)) · min(s/w, 1) · the linear
    cool-down ramp over the last ``cooldown`` steps before ``end``."""
    s = np.asarray(s, dtype=np.float64)
    return (np.minimum(s / SCHEDULE_WARMUP, 1.0) / np.sqrt(np.maximum(s, SCHEDULE_WARMUP))
            * np.clip((end - (s - 1)) / cooldown, 0.0, 1.0))


def logged_steps(first: float, end: float, every: int = 10) -> np.ndarray:
    """The multiples of ``every`` after ``first`` up to ``end``, and ``end``."""
    first = int(first)
    return np.unique(np.append(np.arange(first + every - first % every, end + 1, every),
                               end)).astype(np.float64)


@dataclass(frozen=True)
class ScheduledRun:
    """One run of a family: ``steps`` its own logged steps (every 10), ``lr_steps``/``lr`` its
    schedule from step 10 (a branch: the parent's rates up to its branch step, then its own),
    ``parent`` "" for the parent, ``branch_step`` NaN for it; ``first``/``end`` where its own
    steps start and stop."""

    run: str
    parent: str
    branch_step: float
    first: int
    end: int
    steps: np.ndarray
    lr_steps: np.ndarray
    lr: np.ndarray


def family_schedules(parent: str) -> list[ScheduledRun]:
    """The parent (:data:`SCHEDULE_STEPS` steps) and its branches ``{parent}_cd{b}`` of
    :data:`SCHEDULE_BRANCHES`, parent first."""
    parent_steps = logged_steps(0, SCHEDULE_STEPS)
    out = [ScheduledRun(parent, "", float("nan"), 0, SCHEDULE_STEPS, parent_steps, parent_steps,
                        schedule_rate(parent_steps, SCHEDULE_STEPS, SCHEDULE_COOLDOWN))]
    for b, end in SCHEDULE_BRANCHES.items():
        own = logged_steps(b, end)
        before = parent_steps[parent_steps <= b]
        lr = np.concatenate([schedule_rate(before, SCHEDULE_STEPS, SCHEDULE_COOLDOWN),
                             schedule_rate(own, end, round(0.1 * end))])
        out.append(ScheduledRun(f"{parent}_cd{b}", parent, float(b), b, end, own,
                                np.concatenate([before, own]), lr))
    return out
