"""Training curves with their learning-rate schedules, read from a table: the tidy metrics table
(``learning_rate`` rows carry the schedule, ``probe_loss`` or ``train_loss`` rows the loss; a
cool-down branch gets its parent's rates up to the branch step) or a wide table of another stack
(columns ``run``, ``step``, ``lr``, ``loss``, optional ``n``).

:func:`curves_from_table` returns one :class:`Curve` per run, each loss with its window (a
``train_loss`` row is a mean over the updates since the previous row); :func:`check_runs` says
which runs can be fitted (their rates start near step 0). The layouts, the loss metric chosen
and the windows are in :func:`curves_from_table`'s docstring.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.schema import PROBE_METRIC
from fitting.data.tables import check_numeric, require_columns
from fitting.laws.curves.schedule import dense_lr, warmup_end

__all__ = ["Curve", "curves_from_table", "pair_training_curves", "curve_loss_metric",
           "check_runs", "wide_column_names", "TIDY_LOSS_METRIC", "TIDY_LR_METRIC",
           "PROBE_METRIC"]

TIDY_LOSS_METRIC = "train_loss"
TIDY_LR_METRIC = "learning_rate"


@dataclass
class Curve:
    """One run: its learning-rate log (``lr_steps``, ``lr``), its losses (``steps``, ``loss``;
    may be empty for a run only predicted) and its model size ``n`` (NaN when unknown).

    ``window`` (one per loss, default 0): the loss at step s averages the models after
    s − w … s − 1 updates (a training loss logged over the w updates since the previous row);
    0 = the model after s updates (an evaluation). ``parent``, ``branch_step``: the run a
    cool-down branch left and the step it left it at ("" and NaN for a run of its own)."""

    run: str
    lr_steps: np.ndarray
    lr: np.ndarray
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n: float = float("nan")
    window: np.ndarray = field(default_factory=lambda: np.zeros(0))
    parent: str = ""
    branch_step: float = float("nan")

    def __post_init__(self) -> None:
        self.lr_steps = np.asarray(self.lr_steps, dtype=np.float64)
        self.lr = np.asarray(self.lr, dtype=np.float64)
        self.steps = np.asarray(self.steps, dtype=np.float64)
        self.loss = np.asarray(self.loss, dtype=np.float64)
        if self.steps.shape != self.loss.shape:
            raise FitError(f"run {self.run!r}: {self.steps.size} loss steps but "
                           f"{self.loss.size} losses", column="loss")
        self.window = np.asarray(self.window, dtype=np.float64)
        if self.window.size == 0:
            self.window = np.zeros_like(self.steps)
        if self.window.shape != self.steps.shape or not np.all(
                np.isfinite(self.window) & (self.window >= 0)):
            raise FitError(f"run {self.run!r}: expected one window ≥ 0 per loss, got "
                           f"{self.window.size} for {self.steps.size} losses", column="window")
        order = np.argsort(self.steps, kind="stable")
        self.steps, self.loss = self.steps[order], self.loss[order]
        self.window = self.window[order]
        order = np.argsort(self.lr_steps, kind="stable")
        self.lr_steps, self.lr = self.lr_steps[order], self.lr[order]
        if self.loss.size and not np.all(np.isfinite(self.loss) & (self.loss > 0)):
            raise FitError(f"run {self.run!r}: losses must be finite and positive", column="loss")
        if self.lr_steps.size == 0:
            raise FitError(f"run {self.run!r}: no learning-rate rows", column="lr")

    @property
    def late_start(self) -> float | None:
        """The first logged rate's step when it comes later than two logging intervals (or 100
        steps) after step 0, else None: the schedule areas of such a run are unknown."""
        first = float(self.lr_steps.min())
        gaps = np.diff(np.unique(self.lr_steps))
        allowed = max(100.0, 2.0 * float(np.median(gaps))) if gaps.size else 100.0
        return first if first > allowed else None

    def check_schedule(self) -> None:
        """FitError naming the run when its rates start late (:attr:`late_start`)."""
        if self.late_start is not None:
            raise FitError(
                f"run {self.run!r}: its learning rate is logged from step {self.late_start:g} "
                "on; the schedule areas need the rates from step 0 (a branch resumed from "
                "another run: put the parent's rates in front)", column="lr")

    def eta(self, last_step: int | None = None) -> np.ndarray:
        """η at every step 0…``last_step`` (default: the last logged rate or loss step;
        :func:`fitting.laws.curves.schedule.dense_lr`); FitError when the rates start late."""
        self.check_schedule()
        end = int(np.ceil(max(self.lr_steps.max(), self.steps.max() if self.steps.size else 0)))
        return dense_lr(self.lr_steps, self.lr, end if last_step is None else last_step,
                        run=self.run)

    def fit_steps(self, from_step: float = 0.0) -> np.ndarray:
        """Boolean mask of the losses the laws describe: after the warm-up (the first step at
        which the rate reaches its maximum) and at or after ``from_step``; within the logged
        schedule."""
        if not self.steps.size:
            return np.zeros(0, dtype=bool)
        w = warmup_end(self.eta())
        return (self.steps > w) & (self.steps >= from_step) & (self.steps <= self.lr_steps.max())


def _tidy_curves(df: pd.DataFrame, source: str, loss_metric: str, pair: str | None,
                 eval_set: str | None, loss_window: str | int) -> dict[str, Curve]:
    if _pair_column(df) == "task":  # a run's metrics.jsonl
        df = df.rename(columns={"task": "pair"})
    require_columns(df, ["run_id", "metric", "step", "value"], source)
    lr_rows = df[df["metric"] == TIDY_LR_METRIC]
    loss_rows = df[df["metric"] == loss_metric]
    if eval_set is not None:
        require_columns(df, ["eval_set"], source)
        loss_rows = loss_rows[loss_rows["eval_set"].astype(str) == eval_set]
    if pair is not None:
        require_columns(df, ["pair"], source)
        loss_rows = loss_rows[loss_rows["pair"].astype(str) == pair]
    elif "pair" in loss_rows.columns and (loss_rows["pair"].astype(str) == "all").any():
        loss_rows = loss_rows[loss_rows["pair"].astype(str) == "all"]
    if lr_rows.empty:
        raise FitError(f"{source}: no rows with metric {TIDY_LR_METRIC!r}; the curve laws need "
                       "the learning rate of every run", column="metric", source=source)
    if loss_rows.empty:
        where = "".join(f", {k} {v!r}" for k, v in (("pair", pair), ("eval_set", eval_set))
                        if v is not None)
        raise FitError(f"{source}: no rows with metric {loss_metric!r}{where}", column="metric",
                       source=source)
    parts = {}
    for name, rows in (("lr", lr_rows), ("loss", loss_rows)):
        parts[name] = pd.DataFrame({"run": rows["run_id"].astype(str),
                                    "step": check_numeric(rows, "step", source),
                                    name: check_numeric(rows, "value", source)})
    first = df.drop_duplicates("run_id")
    first = first.set_index(first["run_id"].astype(str))
    branch = {"parent": pd.Series("", index=first.index),
              "branch_step": pd.Series(np.nan, index=first.index)}
    if {"parent_run", "branch_step"} <= set(df.columns):
        parts["lr"] = _with_parent_rates(parts["lr"], df)
        b = pd.to_numeric(first["branch_step"], errors="coerce").astype(np.float64)
        par = first["parent_run"].astype(str).where(np.isfinite(b), "")
        branch = {"parent": par.replace("nan", ""), "branch_step": b}
    parts["loss"]["window"] = _loss_windows(parts["loss"], branch["branch_step"],
                                            loss_window if loss_window != "auto" else
                                            ("gaps" if loss_metric == TIDY_LOSS_METRIC else 0))
    wide = pd.concat([parts["lr"], parts["loss"]], ignore_index=True)
    for k, col in branch.items():
        wide[k] = wide["run"].map(col)
    if "n" in df.columns:
        sizes = df.groupby(df["run_id"].astype(str))["n"].first()
        wide["n"] = wide["run"].map(sizes)
    return _wide_curves(wide, source)


def _loss_windows(loss: pd.DataFrame, branch_step: pd.Series, rule: str | int) -> np.ndarray:
    """Each loss row's window: ``"gaps"`` = the updates since the run's previous loss row (since
    its branch step, or 0, for its first), a number = that many for every row."""
    if rule != "gaps":
        k = float(rule)
        if not np.isfinite(k) or k < 0:
            raise FitError(f"loss_window must be 'auto', 'gaps' or a number ≥ 0, got {rule!r}",
                           column="window")
        return np.full(len(loss), k)
    out = np.zeros(len(loss))
    for run, idx in loss.groupby("run").indices.items():
        steps = loss["step"].to_numpy(np.float64)[idx]
        order = np.argsort(steps, kind="stable")
        start = branch_step.get(run, np.nan)
        prev = np.concatenate([[start if np.isfinite(start) else 0.0], steps[order][:-1]])
        out[idx[order]] = np.maximum(steps[order] - prev, 0.0)
    return out


def _with_parent_rates(lr_rows: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """A branch's schedule: its parent's rates up to the branch step, then its own."""
    first = df.drop_duplicates("run_id")
    extra = []
    for run, parent, b in zip(first["run_id"].astype(str), first["parent_run"].astype(str),
                              pd.to_numeric(first["branch_step"], errors="coerce")
                              .astype(np.float64), strict=True):
        if parent in ("", "nan") or not np.isfinite(b):
            continue
        own = lr_rows["run"] == run
        lr_rows = lr_rows[~own | (lr_rows["step"] > b)]
        par = lr_rows[(lr_rows["run"] == parent) & (lr_rows["step"] <= b)]
        extra.append(par.assign(run=run))
    return pd.concat([lr_rows, *extra], ignore_index=True) if extra else lr_rows


def _wide_curves(df: pd.DataFrame, source: str) -> dict[str, Curve]:
    """Curves of a wide table with columns run, step, lr, loss (empty cells allowed), n, and
    optional window (:attr:`Curve.window`; empty = 0), parent and branch_step."""
    steps = check_numeric(df, "step", source)
    lr = check_numeric(df, "lr", source)
    loss = check_numeric(df, "loss", source)
    n = check_numeric(df, "n", source) if "n" in df.columns else np.full(len(df), np.nan)
    window = check_numeric(df, "window", source) if "window" in df.columns \
        else np.zeros(len(df))
    window = np.where(np.isfinite(window), window, 0.0)
    branch_step = check_numeric(df, "branch_step", source) if "branch_step" in df.columns \
        else np.full(len(df), np.nan)
    parent = df["parent"].fillna("").astype(str).to_numpy() if "parent" in df.columns \
        else np.full(len(df), "")
    runs = df["run"].astype(str).to_numpy()
    out: dict[str, Curve] = {}
    for run in dict.fromkeys(runs):
        sel = runs == run
        has_lr = sel & np.isfinite(lr)
        has_loss = sel & np.isfinite(loss)
        if not has_lr.any():
            raise FitError(f"{source}: run {run!r} has no learning-rate values (column 'lr')",
                           column="lr", source=source)
        st, ls, win = steps[has_loss], loss[has_loss], window[has_loss]
        if st.size:  # a step logged twice (a restart): the mean of its losses
            uniq = np.unique(st)
            idx = np.searchsorted(uniq, st)
            st, ls = uniq, np.bincount(idx, weights=ls) / np.bincount(idx)
            win = np.bincount(idx, weights=win) / np.bincount(idx)
        sizes = n[sel][np.isfinite(n[sel])]
        b = branch_step[sel][np.isfinite(branch_step[sel])]
        out[run] = Curve(run, steps[has_lr], lr[has_lr], st, ls,
                         float(sizes[0]) if sizes.size else float("nan"), window=win,
                         parent=str(parent[sel][0]) if b.size else "",
                         branch_step=float(b[0]) if b.size else float("nan"))
    return out


def _pair_column(df: pd.DataFrame) -> str | None:
    """The tidy table's pair column: ``pair``, or ``task`` (a run's metrics.jsonl); None."""
    return next((c for c in ("pair", "task") if c in df.columns), None)


def _runs_with(df: pd.DataFrame, metric: str, pair: str | None, col: str | None) -> set[str]:
    rows = df[df["metric"] == metric]
    if pair is not None and col is not None:
        rows = rows[rows[col].astype(str) == pair]
    return set(rows["run_id"].astype(str)) if "run_id" in rows.columns else set()


def curve_loss_metric(df: pd.DataFrame, pair: str | None = None) -> str:
    """The loss the curve laws fit when none is named: :data:`PROBE_METRIC` where the table has
    probe rows (of ``pair``; ``pair`` None: of one pair only) for every run that has
    ``train_loss`` rows of it, else :data:`TIDY_LOSS_METRIC` (older tables, and tables whose
    runs were probed only in part). A wide table: ``probe_loss`` where it has such a column."""
    if "metric" not in df.columns:
        return PROBE_METRIC if PROBE_METRIC in df.columns else TIDY_LOSS_METRIC
    col = _pair_column(df)
    probe = df[df["metric"] == PROBE_METRIC]
    if probe.empty:
        return TIDY_LOSS_METRIC
    if pair is None and col is not None:
        pairs = set(probe[col].astype(str))
        if len(pairs) != 1:
            return TIDY_LOSS_METRIC  # train_loss of `all`: no probe row covers every pair
        pair = next(iter(pairs))
    probed = _runs_with(df, PROBE_METRIC, pair, col)
    trained = _runs_with(df, TIDY_LOSS_METRIC, pair, col)
    return PROBE_METRIC if probed and trained <= probed else TIDY_LOSS_METRIC


def curves_from_table(df: pd.DataFrame, *, source: str = "table",
                      loss_metric: str | None = None, pair: str | None = None,
                      eval_set: str | None = None, loss_window: str | int = "auto"
                      ) -> dict[str, Curve]:
    """{run: :class:`Curve`} of a tidy metrics table or a wide table.

    Two layouts (after ``--columns``' renaming, :func:`fitting.data.tables.read_table`):

    * the tidy metrics table (docs/reference/metrics_schema.md): rows with ``metric`` =
      ``learning_rate`` carry the schedule, rows with ``metric`` = ``probe_loss`` where the table has
      them (:func:`curve_loss_metric`), else ``train_loss`` (task ``all`` where the table has
      per-pair rows too) the loss; ``run_id``, ``step``, ``value``, optional ``n``. A
      cool-down branch (``parent_run``, ``branch_step``) gets its parent's rates up to the branch step
      in front of its own: its schedule areas start at step 0 like the parent's.
    * a wide table of another stack (or ours pivoted): one row per logged step, columns ``run`` (or
      ``run_id``), ``step``, ``lr`` (or ``learning_rate``, our metric's name) and ``loss`` (or a
      column named as ``loss_metric``, default ``train_loss``), optional ``n``; a row may carry the
      rate without a loss (or the loss without a rate: a validation loss logged between rate logs)
      — empty cells are left out. Losses read from a ``train_loss`` column (our metric) without a
      ``window`` column get the tidy table's windows (below); any other loss column is read at its
      step (window 0) unless the table has ``window``.

    The tidy table's pair column is ``pair`` (the tidy table's) or ``task`` (``metrics.jsonl``'s).

    Which losses: ``loss_metric`` (default :func:`curve_loss_metric`: ``probe_loss`` where the table
    has probe rows of the pair, else ``train_loss``), ``pair`` (default ``all`` where the table has
    per-pair rows; name a pair for its own curve, e.g. the validation ``loss`` of the pair a
    single-pair run trains) and ``eval_set``. A ``probe_loss`` row (schema revision 1.4) is a pair's
    loss on the same fixed examples at every probe step: its points differ by the model only, where
    ``train_loss`` rows scatter with their batches (≈ 6 % on the main job). Each loss carries its
    **window** (``Curve.window``): a
    tidy ``train_loss`` row at step s is the mean over the updates since the previous row (the
    training stack's loss window, each batch's loss measured before its update), i.e. over the
    models after s − w … s − 1 updates, w the gap to the previous row (to the branch step for a
    branch's first row, to 0 for a run's); an evaluation (any other metric) is the model after s
    updates (w = 0). In a cool-down the loss falls fastest at its end, so reading a windowed loss
    as the loss at s puts the predicted end ~w/2 steps too late (benchmarks/studies/curve_laws_main_job.py).

    A loss at step s is explained by the rates of steps 1…s, so every curve's rates must start near
    step 0 (within two logging intervals, or 100 steps): a table whose first *loss* comes long after
    step 0 is fine; a run whose first *rate* does loads, but fitting or predicting it is an error
    naming the run (``mnmt-fit curves`` leaves such runs out of the fit, with a warning).

    ``loss_metric`` None: :func:`curve_loss_metric` (``probe_loss`` where the table has it, else
    ``train_loss``). Tidy table only: ``pair`` (None: ``all`` where present), ``eval_set`` (None: any) select the
    loss rows; ``loss_window`` their windows: ``"auto"`` = the gap to the previous row for
    ``train_loss`` (the training stack's loss window) and 0 for any other metric, ``"gaps"``
    that rule for any metric, a number that window for every row. A wide table's windows are
    its ``window`` column (0 without one).

    FitError naming the missing column (and the columns the table has) otherwise."""
    if loss_metric is None:
        loss_metric = curve_loss_metric(df, pair)
    if {"metric", "value"} <= set(df.columns):
        return _tidy_curves(df, source, loss_metric, pair, eval_set, loss_window)
    renamed = wide_column_names(df, loss_metric)
    require_columns(renamed, ["run", "step", "lr", "loss"], source)
    if "window" not in renamed.columns and "loss" not in df.columns \
            and loss_window != 0 and (loss_metric == TIDY_LOSS_METRIC or loss_window == "gaps"):
        renamed = _with_gap_windows(renamed, source)
    return _wide_curves(renamed, source)


def _with_gap_windows(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """A wide table whose losses are our ``train_loss`` (a column of that name, no ``window``):
    each loss's window is the gap to the run's previous loss (the tidy table's rule)."""
    loss = check_numeric(df, "loss", source)
    has = np.isfinite(loss)
    rows = pd.DataFrame({"run": df["run"].astype(str).to_numpy()[has],
                         "step": check_numeric(df, "step", source)[has]})
    first = df.drop_duplicates("run").set_index(df.drop_duplicates("run")["run"].astype(str))
    branch = (pd.to_numeric(first["branch_step"], errors="coerce").astype(np.float64)
              if "branch_step" in df.columns else pd.Series(dtype=np.float64))
    window = np.full(len(df), np.nan)
    window[has] = _loss_windows(rows, branch, "gaps")
    return df.assign(window=window)


def wide_column_names(df: pd.DataFrame, loss_metric: str = TIDY_LOSS_METRIC) -> pd.DataFrame:
    """A wide table's columns under the names :func:`curves_from_table` reads: ``run_id`` →
    ``run``, ``learning_rate`` (:data:`TIDY_LR_METRIC`) → ``lr``, each where the table lacks the
    shorter name; the column ``loss_metric`` → ``loss`` where there is no ``loss`` column, or
    where ``loss_metric`` is not the default (a loss named on purpose)."""
    cols = set(df.columns)
    rename: dict[str, str] = {}
    if "run" not in cols and "run_id" in cols:
        rename["run_id"] = "run"
    if "lr" not in cols and TIDY_LR_METRIC in cols:
        rename[TIDY_LR_METRIC] = "lr"
    if loss_metric != "loss" and loss_metric in cols and (
            "loss" not in cols or loss_metric != TIDY_LOSS_METRIC):
        df = df.drop(columns=["loss"]) if "loss" in cols else df
        rename[loss_metric] = "loss"
    return df.rename(columns=rename) if rename else df


def check_runs(curves: dict[str, Curve], runs: list[str] | tuple[str, ...],
               what: str = "held-out run") -> list[str]:
    """``runs`` checked to be runs of ``curves``; FitError naming an unknown one and the closest
    known name (difflib) otherwise."""
    known = sorted(curves)
    for r in runs:
        if r not in curves:
            close = difflib.get_close_matches(str(r), known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            shown = ", ".join(known[:30]) + (f", … ({len(known)} in all)" if len(known) > 30
                                             else "")
            raise FitError(f"{what} {r!r} is not a run of the table{hint} Known runs: {shown}",
                           column="run")
    return list(dict.fromkeys(runs))


def pair_training_curves(table: pd.DataFrame, pair: str) -> dict[str, Curve]:
    """{run: curve} of one pair's training curve for the runs that train it, cool-down branches
    with their parents' rates, each loss read at its step (window 0): its ``probe_loss`` rows
    where :func:`curve_loss_metric` finds them (schema revision 1.4), else its
    :data:`TIDY_LOSS_METRIC` rows; FitError when the table has neither (revision 1.3 logs the
    training loss per pair). A run trains the pair when it has ``train_loss`` rows of it, or,
    in a table of probe rows alone, when its ``weight`` of the pair is not 0."""
    metric = curve_loss_metric(table, pair)
    is_pair = table["pair"].astype(str) == pair
    rows = table[(table["metric"] == metric) & is_pair]
    if metric == PROBE_METRIC:
        trained = _runs_with(table, TIDY_LOSS_METRIC, pair, "pair")
        if trained:
            rows = rows[rows["run_id"].astype(str).isin(trained)]
        elif "weight" in rows.columns:
            rows = rows[~(pd.to_numeric(rows["weight"], errors="coerce") <= 0)]
    if rows.empty:
        raise FitError(f"no {TIDY_LOSS_METRIC!r} or {PROBE_METRIC!r} rows of the pair {pair!r} "
                       "(schema revision 1.3 logs the training loss per pair)", column="metric")
    runs = set(rows["run_id"].astype(str))
    sub = table[table["run_id"].astype(str).isin(runs)]
    return curves_from_table(sub, source="report", loss_metric=metric, pair=pair,
                             loss_window=0)
