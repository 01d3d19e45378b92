"""The report's L(N, D) section (Caillaut et al. 2024 eq. 2, the Chinchilla form of Hoffmann et
al. 2022): E + A/N^α + B/D^β fitted on every evaluation of every run, iso-loss contours, and the
compute-optimal split of a budget C ≈ 6·N·D.

:func:`chinchilla_section` writes it (which points form the D axis: its docstring);
:func:`fit_cooled_law` fits, on cooled-down budgets only, the law the report leads with
(:mod:`fitting.laws.budget.chinchilla_joint`, whose limit E is the pair's fitted L∞) and
:func:`cooled_law_section` writes it with its backtest against the seed noise.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pandas as pd

from fitting import plots
from fitting.core.base import FitError
from fitting.core.options import UncertaintyOptions
from fitting.core.seed_noise import SeedNoise, pooled_sd
from fitting.data.seeds import seed_means
from fitting.data.tables import has_branches, with_optional_columns
from fitting.intervals.cooled_law import LEAVE_ONE_RUN_OUT, cooled_law_intervals
from fitting.laws.budget.chinchilla import ChinchillaFit, ChinchillaOptions, fit_chinchilla
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit, coef_key, fit_joint_chinchilla
from fitting.laws.curves.learning_curve import cooldown_budgets, cooldown_start
from fitting.plots.laws import plot_chinchilla_contours
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report
from fitting.report.view import StudyView

__all__ = ["D_AXIS_BRANCHES", "D_AXIS_EVALUATIONS", "COOLED_LAW", "PREDICTED", "chinchilla_points",
           "cooled_points",
           "compute_budgets", "chinchilla_section", "trained_seed_groups",
           "largest_size_seed_noise", "largest_size_seed_noises", "fit_cooled_law",
           "cooled_law_section"]

#: the section's D axis with cool-down branches in the table, and without
D_AXIS_BRANCHES = "cool-down branch ends (Hägele et al. 2024)"
D_AXIS_EVALUATIONS = "intermediate evaluations"

_KEY = "L(N, D) (Caillaut eq. 2)"
#: cooled-down budgets per run that :func:`fit_cooled_law` needs (fewer: eq. 7 keeps the lead)
MIN_BUDGETS = 3
#: the name of the law fitted by :func:`fit_cooled_law`, as the report and fits.json say it
COOLED_LAW = "L(N, D) across weights on cooled-down budgets"
#: the column of the points that marks a cooled-down budget predicted, not trained
#: (:mod:`fitting.report.predicted_budgets`)
PREDICTED = "predicted"
_NEED = {"run_id", "pair", "n", "step", "tokens", "value", "eval_set", "metric"}


def chinchilla_points(table: pd.DataFrame, eval_set: str = "validation",
                      metric: str = "loss", budgets: pd.DataFrame | None = None,
                      predicted: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str, str]:
    """The (pair, weight, n, step, tokens, value) points the law is fitted on, a sentence on what
    was left out, and why the section does not apply ("" when it does). With cool-down branches
    in the table the points are the cooled-down budgets (:data:`D_AXIS_BRANCHES`), else every
    evaluation after the warm-up (:data:`D_AXIS_EVALUATIONS`). ``budgets``: ``table``'s
    cooled-down budgets where already derived (:attr:`fitting.report.view.StudyView.budgets_fit`),
    else derived here. ``predicted``: cooled-down budgets not trained, predicted from their
    run's curve (:func:`fitting.report.predicted_budgets.predicted_budgets`), added to the
    cooled-down budgets; every point says in ``predicted`` whether it was (a seed mean: whether
    any of its seeds was)."""
    if not _NEED <= set(table.columns):
        return pd.DataFrame(), "", f"the table lacks {sorted(_NEED - set(table.columns))}"
    if has_branches(table):
        return _branch_points(table, eval_set, metric, budgets, predicted)
    t = with_optional_columns(table)
    s = t[(t["eval_set"].astype(str) == eval_set) & (t["metric"].astype(str) == metric)].copy()
    for c in ("n", "step", "tokens", "value"):
        s[c] = pd.to_numeric(s[c], errors="coerce").astype(float)
    ok = np.isfinite(s[["n", "step", "tokens", "value"]].to_numpy()).all(axis=1)
    s = s[ok & (s["step"] > 0).to_numpy() & (s["tokens"] > 0).to_numpy()
          & (s["value"] > 0).to_numpy()]
    if "weight" in s.columns:
        s = s[~(pd.to_numeric(s["weight"], errors="coerce") <= 0).to_numpy()]
    if s["n"].nunique() < 3:
        return pd.DataFrame(), "", f"fewer than 3 model sizes ({s['n'].nunique()})"
    per_run = s.groupby(["run_id", "pair"])["tokens"].nunique()
    if int(per_run.min()) < 3:
        few = int((per_run < 3).sum())
        return pd.DataFrame(), "", (
            f"{few} of {len(per_run)} runs have loss evaluations at fewer than 3 distinct token "
            "counts; D (training tokens) needs intermediate evaluations of every run")
    # warm-up: up to the step where the run's learning rate peaks, else its first evaluation
    lr = t[t["metric"].astype(str) == "learning_rate"]
    peak = {}
    for r, g in lr.groupby("run_id"):
        v = pd.to_numeric(g["value"], errors="coerce").to_numpy(float)
        if np.isfinite(v).any():
            peak[str(r)] = float(pd.to_numeric(g["step"], errors="coerce").to_numpy(float)[
                np.nanargmax(v)])
    first = s.groupby("run_id")["step"].transform("min")
    end = s["run_id"].astype(str).map(peak).astype(float)
    drop = np.where(np.isfinite(end), s["step"] <= end, s["step"] <= first)
    kept = s[~drop]
    if int(kept.groupby(["run_id", "pair"])["tokens"].nunique().reindex(
            per_run.index, fill_value=0).min()) < 3:
        kept, note = s, ("the warm-up evaluations are kept: without them some runs would have "
                         "fewer than 3 points")
    else:
        how = ("up to the learning-rate peak" if peak else "the first evaluation of each run")
        note = (f"{int(drop.sum())} warm-up evaluations left out ({how})" if drop.any() else
                "no evaluation lies inside the warm-up (up to the learning-rate peak)")
    note = f"D axis: {D_AXIS_EVALUATIONS}; {note}"
    cooled = [r for r, g in lr.groupby("run_id") if str(r) in set(kept["run_id"].astype(str))
              and cooldown_start(pd.to_numeric(g["step"], errors="coerce"),
                                 pd.to_numeric(g["value"], errors="coerce")) is not None]
    if cooled:
        note += (f"; {len(cooled)} runs end with a learning-rate cool-down, whose evaluations "
                 "fall below the trajectory the earlier ones set: the law describes training "
                 "to D under this schedule")
    if "weight" not in kept.columns:
        kept = kept.assign(weight=np.nan)
    kept = seed_means(kept, by=("step",), mean_columns=("value", "tokens"))
    return kept, note, ""


def _branch_points(table: pd.DataFrame, eval_set: str, metric: str,
                   budgets: pd.DataFrame | None = None, predicted: pd.DataFrame | None = None
                   ) -> tuple[pd.DataFrame, str, str]:
    """:func:`chinchilla_points` on the cooled-down budgets: each parent run's final point and
    its branches' final points (Hägele et al. 2024), trained or ``predicted``; a run needs ≥ 2
    of them."""
    b = (cooldown_budgets(with_optional_columns(table), eval_set=eval_set, metric=metric,
                          drop_invalid=True) if budgets is None else budgets.copy())
    b = b.assign(**{PREDICTED: 0.0})
    if predicted is not None and len(predicted):
        extra = predicted[[c for c in predicted.columns if c in b.columns]]
        b = pd.concat([b, extra.assign(**{PREDICTED: 1.0})], ignore_index=True)
    for c in ("n", "step", "tokens", "value"):
        b[c] = pd.to_numeric(b[c], errors="coerce").astype(float)
    ok = np.isfinite(b[["n", "step", "tokens", "value"]].to_numpy()).all(axis=1)
    b = b[ok & (b["tokens"] > 0).to_numpy()]
    if "weight" in b.columns:
        b = b[~(pd.to_numeric(b["weight"], errors="coerce") <= 0).to_numpy()]
    per_run = b.groupby(["parent", "pair"])["tokens"].nunique()
    many = per_run[per_run >= 2].index
    kept = b.set_index(["parent", "pair"]).loc[many].reset_index() if len(many) else b.iloc[:0]
    if kept["n"].nunique() < 3:
        return pd.DataFrame(), "", (
            f"fewer than 3 model sizes ({kept['n'].nunique()}) with runs of ≥ 2 cooled-down "
            "budgets (the run's end and its cool-down branches' ends)")
    single = int((per_run < 2).sum())
    n_pred = int(kept[PREDICTED].sum())
    note = (f"D axis: {D_AXIS_BRANCHES}: {len(kept)} cooled-down budgets of {len(many)} "
            "(run, pair) curves (each run's final loss and its branches' final losses)"
            + (f", {n_pred} of them predicted from their run's curve (not trained; "
               "fitting.report.predicted_budgets)" if n_pred else "")
            + (f"; {single} (run, pair) with one budget only left out" if single else ""))
    if "weight" not in kept.columns:
        kept = kept.assign(weight=np.nan)
    kept = seed_means(kept, by=("step",), mean_columns=("value", "tokens", PREDICTED))
    kept[PREDICTED] = kept[PREDICTED].astype(float) > 0
    return kept, note, ""


def compute_budgets(fit: ChinchillaFit, c_trained: np.ndarray, n_range, k: int = 3) -> list[dict]:
    """Compute-optimal N*, D* (C = 6·N·D) at ``k`` budgets spanning the trained ones and at 10×
    the largest; ``extrapolated`` when N* lies outside the trained sizes."""
    lo, hi = float(np.min(c_trained)), float(np.max(c_trained))
    budgets = list(np.geomspace(lo, hi, k)) + [10 * hi]
    n_opt, d_opt = fit.compute_optimal(np.array(budgets))
    out = []
    for c, n, d in zip(budgets, np.atleast_1d(n_opt), np.atleast_1d(d_opt), strict=True):
        out.append({"C": float(c), "N": float(n), "D": float(d), "D_per_N": float(d / n),
                    "loss": float(fit.predict(n, d)),
                    "extrapolated": bool(n < n_range[0] / 1.01 or n > n_range[1] * 1.01)})
    return out


def chinchilla_section(doc: Document, rep: Report, view: StudyView, out_dir: str, *,
                       uncertainty: UncertaintyOptions = UncertaintyOptions(),
                       max_panels: int = 6) -> None:
    """Fit L(N, D) per pair (and weight) on the fitted runs (``view.table_fit``, its
    cooled-down budgets ``view.budgets_fit``), tabulate it with the compute-optimal N and D, draw
    the contours; reasons it cannot go to ``rep.skipped``.

    It applies when the table has ≥ 3 model sizes whose runs were evaluated at ≥ 3 steps each with
    growing ``tokens`` (the intermediate evaluations are the D axis: D = training target tokens seen
    up to the step). The points of a run inside its learning-rate warm-up are left out (up to the
    step where its ``learning_rate`` rows peak; without such rows its first evaluation): there the
    loss reflects the schedule, not the tokens seen. Runs repeated with several seeds contribute the
    seed mean at each step. One law is fitted per pair and weight (a pair trained at several weights
    gets one law per weight: D counts every token of the run, so a different mixture is a different
    law). The fit is :func:`fitting.laws.budget.chinchilla.fit_chinchilla` (Huber in log space, L-BFGS) from
    variable-projection starts; ± is the sd over bootstrap refits. The trajectories of one run share
    its learning-rate schedule, so a law from intermediate evaluations describes training to D under
    that schedule, which a cool-down at the end lowers (Caillaut et al. fit it the same way).

    When the table has cool-down branches (schema revision 1.2), the D axis is the cooled-down budgets
    instead (Hägele et al. 2024): each parent run's final point and each of its branches' final
    points (:func:`fitting.laws.curves.learning_curve.cooldown_budgets`; D = ``tokens`` there), every one the
    loss of a run trained to D with a full cool-down. A run then needs ≥ 2 budgets (runs with one are
    left out, and said so); seeds are averaged as above. ``rep.chinchilla["d_axis"]`` and the
    section's note say which D axis was used.

    :func:`fit_cooled_law` fits, on those cooled-down budgets only, the law the report leads with
    (:mod:`fitting.laws.budget.chinchilla_joint`: L(N, D) across weights, exponents and E shared by a
    pair's weights as in Fernandes eq. 7), whose N, D → ∞ limit E is the pair's fitted L∞;
    :func:`cooled_law_section` writes it, with its leave-largest-size-out backtest against the seed
    noise."""
    table = view.table_fit
    pts, note, why = chinchilla_points(table, view.eval_set, view.metric, view.budgets_fit)
    if why:
        rep.skipped[_KEY] = why
        return
    doc.h(2, "Model size and training tokens: L(N, D) (Caillaut eq. 2)")
    branches = has_branches(table)
    where = ("D the training target tokens at the end of each cool-down, fitted per pair (and "
             "weight) on every run's final loss and its cool-down branches' final losses"
             if branches else
             "D the training target tokens seen at each evaluation, fitted per pair (and weight) "
             "on every evaluation of every run")
    doc.p("L(N, D) = E + A/N^α + B/D^β with N the non-embedding parameters and "
          f"{where} (Huber loss on log L, L-BFGS; ± sd over bootstrap refits). "
          f"{note}. Compute-optimal: N*, D* minimising L at C = 6·N·D "
          "(Hoffmann et al. eq. 4).")
    boot = uncertainty.capped_resamples(30)
    rep.chinchilla.update({"fits": {}, "budgets": {}, "points_note": note,
                           "d_axis": D_AXIS_BRANCHES if branches else D_AXIS_EVALUATIONS})
    rows, brows, panels = [], [], {}
    for (pair, w), g in pts.groupby(["pair", "weight"], dropna=False, sort=True):
        label = str(pair) if pts.loc[pts["pair"] == pair, "weight"].nunique() <= 1 \
            else f"{pair} p={float(w):g}"
        if g["n"].nunique() < 3:
            rep.skipped[f"{_KEY} {label}"] = f"{g['n'].nunique()} model sizes (needs 3)"
            continue
        try:
            fit = fit_chinchilla(g["n"], g["tokens"], g["value"], bootstrap=boot, seed=uncertainty.seed,
                                 options=ChinchillaOptions(init="varpro"))
        except FitError as e:
            rep.skipped[f"{_KEY} {label}"] = str(e)
            continue
        rep.chinchilla["fits"][label] = fit.to_json()
        rep.warnings += [f"L(N, D) {label}: {m}" for m in fit.warnings]
        sd = fit.stderr or {}
        bt = fit.meta.get("backtest") or {}
        rows.append([label, str(fit.n_points), *[format_number(fit[k], sd.get(k)) for k in
                                                 ("E", "A", "alpha", "B", "beta")],
                     format_number(fit.goodness.get("rmse_log"), digits=2),
                     format_number(bt.get("rmse_log"), digits=2) if bt else "–"])
        n_range = (float(g["n"].min()), float(g["n"].max()))
        last = g.sort_values("step").groupby("n").tail(1)
        c_trained = 6.0 * last["n"].to_numpy(float) * last["tokens"].to_numpy(float)
        finite = all(fit.params.get(k) is not None and np.isfinite(float(fit.params[k]))
                     for k in ("E", "A", "alpha", "B", "beta"))
        if not finite:
            rep.skipped[f"compute-optimal {label}"] = ("a fitted coefficient is not finite (the "
                                                       "term is not pinned by the data)")
            budgets = []
        elif fit["alpha"] <= 0 or fit["beta"] <= 0:
            rep.skipped[f"compute-optimal {label}"] = "a fitted exponent is not positive"
            budgets = []
        else:
            budgets = compute_budgets(fit, c_trained, n_range)
        rep.chinchilla["budgets"][label] = budgets
        for b in budgets:
            brows.append([label, f"{b['C']:.3g}", f"{b['N']:.3g}" + (" (extrapolated)" if
                                                                   b["extrapolated"] else ""),
                          f"{b['D']:.3g}", f"{b['D_per_N']:.3g}", format_number(b["loss"])])
        if len(panels) < max_panels:
            panels[label] = _panel(fit, g, budgets)
    doc.table(["pair", "points", "E", "A", "α", "B", "β", "rmse log L", "backtest rmse"], rows)
    if not rows:
        doc.p("Skipped: no pair could be fitted (see Skipped).")
        return
    doc.p("Compute-optimal model size and tokens at budgets spanning the trained runs' final "
          "compute (C = 6·N·D) and at 10× the largest; \"extrapolated\" where N* lies outside "
          "the trained sizes.")
    doc.table(["pair", "C (FLOPs)", "N*", "D*", "D*/N*", "predicted loss"], brows)
    try:
        rep.figures["chinchilla"] = plots.save(
            plot_chinchilla_contours(panels), os.path.join(out_dir, "figures", "chinchilla.png"))
        doc.img("figures/chinchilla.png", "Iso-loss contours of the fitted L(N, D), each run's "
                "points (dots along its N), the compute-optimal frontier (red) and the "
                "tabulated budgets (diamonds); cf. Caillaut eq. 2, Hoffmann et al. Fig. 4."
                + ("" if len(panels) == len(rows) else f" First {len(panels)} of {len(rows)} fits."))
    except Exception as e:  # plotting must never break the report
        rep.skipped["figures (L(N, D))"] = f"{type(e).__name__}: {e}"


def _panel(fit: ChinchillaFit, g: pd.DataFrame, budgets: list[dict]) -> dict:
    """The contour panel of one fit: its ranges hold the runs and the tabulated budgets."""
    n, d = g["n"].to_numpy(float), g["tokens"].to_numpy(float)
    bn = np.array([b["N"] for b in budgets]) if budgets else np.empty(0)
    bd = np.array([b["D"] for b in budgets]) if budgets else np.empty(0)
    all_n, all_d = np.concatenate([n, bn]), np.concatenate([d, bd])
    n_range = (all_n.min() / 2, all_n.max() * 2)
    d_range = (all_d.min() / 2, all_d.max() * 2)
    frontier = None
    if budgets:
        cs = np.geomspace(budgets[0]["C"] / 3, budgets[-1]["C"] * 3, 60)
        frontier = fit.compute_optimal(cs)
    traj = {float(k): v["tokens"].to_numpy(float) for k, v in g.groupby("n")}
    return {"predict": fit.predict, "n_range": n_range, "d_range": d_range, "trajectories": traj,
            "frontier": frontier, "budgets": (bn, bd) if budgets else None}


def trained_seed_groups(spread: dict) -> list[dict]:
    """The repeated experiments of :func:`fitting.data.seeds.seed_spread` whose seed noise
    is that of a trained loss: a finite size, a positive mean, and the pair trained (weight
    > 0, or no weight column). A pair at weight 0 is evaluated zero-shot and varies with the
    seed far more: never the noise a trained loss is judged against (as
    :func:`fitting.report.sections.verification.verification_seed_noise` keeps it apart)."""
    return [g for g in spread.get("groups") or []
            if np.isfinite(g["n"]) and g["mean"] > 0 and not g.get("weight", np.nan) <= 0]


def largest_size_seed_noises(spread: dict, below: float | None = None
                             ) -> tuple[dict[str, SeedNoise], float | None]:
    """``({pair: relative seed sd at the largest repeated size}, that size)`` from
    :func:`fitting.data.seeds.seed_spread`, over :func:`trained_seed_groups` only: per pair,
    the relative sds (sd / mean) of the experiments repeated there pooled by the pooled
    variance rule (:func:`fitting.core.seed_noise.pooled_sd`: their seeds and dof summed);
    empty when no trained experiment was repeated. ``below``: only sizes under it (the noise a
    prediction of that size may use without reading the size judged)."""
    groups = [g for g in trained_seed_groups(spread)
              if below is None or g["n"] < float(below) * (1 - 1e-9)]
    if not groups:
        return {}, None
    n_max = max(g["n"] for g in groups)
    by_pair: dict[str, list[tuple[float, int]]] = {}
    for g in groups:
        if g["n"] == n_max:
            by_pair.setdefault(g["pair"], []).append((g["sd"] / g["mean"], int(g["seeds"])))
    out = {p: pooled_sd(v, f"seed sd at N = {n_max:.3g}") for p, v in by_pair.items()}
    return {p: v for p, v in out.items() if v is not None}, float(n_max)


def largest_size_seed_noise(spread: dict) -> tuple[dict[str, float], float | None]:
    """The σ values of :func:`largest_size_seed_noises`: ``({pair: relative seed sd}, size)``."""
    noise, n_at = largest_size_seed_noises(spread)
    return {p: v.sigma for p, v in noise.items()}, n_at


def cooled_points(view: StudyView, predicted: pd.DataFrame | None = None
                  ) -> tuple[pd.DataFrame | None, str, str]:
    """(points, note, why not): the cooled-down budgets L(N, D) across weights is fitted on —
    :func:`chinchilla_points` of the fitted runs (``view.table_fit``, ``view.budgets_fit``)
    with the ``predicted`` budgets — or (None, "", reason) when the table has no cool-down
    branches or a run keeps fewer than :data:`MIN_BUDGETS` budgets."""
    table = view.table_fit
    if not has_branches(table):
        return None, "", ("no cool-down branches: the converged loss needs cooled-down losses at "
                          "several budgets D per run (StudySpec.cooldown_branches)")
    pts, note, why = chinchilla_points(table, view.eval_set, view.metric, view.budgets_fit,
                                       predicted)
    if why:
        return None, "", why
    few = int(pts.groupby(["pair", "weight", "n"], dropna=False)["tokens"].nunique().min())
    if few < MIN_BUDGETS:
        return None, "", (f"a run with {few} cooled-down budgets: L(N, D) across weights needs "
                          f"≥ {MIN_BUDGETS} per run (the run's end and ≥ 2 branches, trained "
                          "or predicted)")
    return pts, note, ""


def fit_cooled_law(view: StudyView, *, uncertainty: UncertaintyOptions = UncertaintyOptions(),
                   noise_rel: dict[str, SeedNoise] | None = None,
                   predicted: pd.DataFrame | None = None,
                   points: tuple[pd.DataFrame | None, str, str] | None = None
                   ) -> tuple[JointChinchillaFit | None, str, str]:
    """(fit, note, why not): :func:`fitting.laws.budget.chinchilla_joint.fit_joint_chinchilla` on the
    cooled-down budgets of the fitted runs (``view.table_fit``, ``view.budgets_fit``;
    :func:`chinchilla_points` with cool-down branches), or
    (None, "", reason) when :func:`cooled_points` has none or no pair could be fitted; a pair that cannot be fitted is left out with its reason (``meta["failed_pairs"]``),
    the others kept. ``noise_rel``: the relative seed noise per pair the backtest is judged
    against (:func:`largest_size_seed_noises`; on too few dof the backtest is information).
    ``predicted``: cooled-down budgets not trained, predicted from their run's curve
    (:func:`chinchilla_points`): fitted like the trained ones, never graded by the backtest;
    ``meta["predicted_points"][pair]`` counts them. ``points``: :func:`cooled_points`' result
    for this view (with its ``predicted`` budgets), when the caller has it already; ``predicted``
    is then not read."""
    pts, note, why = cooled_points(view, predicted) if points is None else points
    if why:
        return None, "", why
    try:
        unc = (replace(uncertainty, method=None) if uncertainty.method == "bootstrap"
               else uncertainty)
        fit = fit_joint_chinchilla(pts, uncertainty=unc, noise_rel=noise_rel, form="auto",
                                   skip_failed_pairs=True)
    except FitError as e:
        return None, "", str(e)
    if uncertainty.method not in (None, "none"):
        try:
            below = {p: largest_size_seed_noises(view.seeds, bt["held_out_n"])[0].get(p)
                     for p, bt in (fit.backtest or {}).items() if bt}
            cooled_law_intervals(fit, pts, {p: v for p, v in below.items() if v is not None},
                                 uncertainty.seed)
        except (FitError, ValueError) as e:  # the intervals never cost the fit
            fit.meta["predictive_failed"] = f"{type(e).__name__}: {e}"
    return fit, note, ""


def _selection_table(doc: Document, fit: JointChinchillaFit) -> None:
    """How each pair's form and budgets were chosen (fitting.laws.budget.chinchilla_joint.select_form)."""
    selection = fit.meta.get("selection") or {}
    rows = []
    for pair, sel in selection.items():
        for i, c in enumerate(sel["candidates"]):
            rows.append([pair, c["form"], f"last {c['budgets']}",
                         "–" if c.get("score") is None else f"{c['score']:.2%}",
                         "–" if c.get("rmse_d") is None else f"{c['rmse_d']:.2%}",
                         "–" if c.get("rmse_n") is None else f"{c['rmse_n']:.2%}",
                         format_number(c.get("E")) if "E" in c else c.get("error", "–"),
                         "chosen" if i == sel["chosen"] else ""])
    if not rows:
        return
    doc.p("Form and budgets chosen per pair by predicting points the candidate did not see "
          "(the choice never sees the true L∞): each run's last budget from the earlier budgets "
          "of all runs (in D) and the largest size's last budget from the smaller sizes (in N); the lowest "
          "relative RMSE over both wins. A candidate fits each run's last k budgets (the "
          "earliest budgets of short runs can lie in a phase no power law describes).")
    doc.table(["pair", "form", "budgets", "score", "RMSE in D", "RMSE in N", "E", ""], rows)


def _backtest_text(pair: str, bt: dict) -> str:
    """One sentence: the leave-largest-out backtest against its noise level."""
    chosen = ("" if bt.get("budgets") is None else
              f" (form {bt['form']} on each run's last {bt['budgets']} budgets, chosen on the "
              "smaller sizes only)")
    miss = (f"refitted without N = {bt['held_out_n']:.3g}{chosen}, the law predicts its "
            f"{len(bt['errors'])} cooled-down losses with RMSE {bt['rmse_rel']:.2%} (mean "
            f"{bt['mean_rel']:+.2%}, largest {bt['max_abs_rel']:.2%}; L∞ of the refit "
            f"{bt['l_inf']:.4g})")
    if bt.get("noise_rel") is None:
        return (f"{pair}: {miss}; not judged: no seed noise measured (repeat a run with "
                "another seed; the fit's residual sd includes the misfit the backtest exposes).")
    noise = f"{bt['tolerance']:.3g}× the noise {bt['noise_rel']:.2%} ({bt['noise_source']})"
    if bt["within"] is None:
        return f"{pair}: {miss}; against {noise}."
    if bt["within"]:
        return f"{pair}: {miss}, within {noise}."
    return (f"{pair}: {miss}, beyond {noise}: the size law cannot be extrapolated here by one "
            f"size step; its prediction at the next size misses by about "
            f"{bt['rmse_rel'] / max(bt['noise_rel'], 1e-12):.1f}× the noise.")


def _interval_texts(fit: JointChinchillaFit) -> list[str]:
    """Per pair: how many backtest points the predictive intervals held, and E's interval."""
    out = []
    for pair in fit.pairs or []:
        parts = []
        bt = (fit.backtest or {}).get(pair) or {}
        cov = bt.get("coverage")
        if cov and cov["0.80"]["n"]:
            pv = bt.get("predictive") or {}
            parts.append(f"the backtest's {cov['0.80']['n']} points inside the 80 % interval "
                         f"{cov['0.80']['inside']}, inside the 95 % {cov['0.95']['inside']} "
                         f"(calibrated by {pv.get('calibration')} on {pv.get('calibration_n')} "
                         + ("runs)" if pv.get("calibration") == LEAVE_ONE_RUN_OUT else "errors)"))
        elif cov and cov["0.80"].get("left_out"):
            parts.append(f"the backtest's {cov['0.80']['left_out']} intervals not calibrated "
                         "(no calibration term: too narrow, not counted)")
        e = (fit.meta.get("E_predictive") or {}).get(pair) or {}
        if "lo80" in e:
            parts.append(f"E {e['estimate']:.4g}, 80 % [{e['lo80']:.4g}, {e['hi80']:.4g}], "
                         f"95 % [{e['lo95']:.4g}, {e['hi95']:.4g}] (resampled runs and forms "
                         "only: E is never measured)")
        if parts:
            out.append(f"{pair}: " + "; ".join(parts) + ".")
    return out


def cooled_law_section(doc: Document, rep: Report, fit: JointChinchillaFit | None, note: str,
                       why: str, ground_truth: dict[str, float] | None) -> None:
    """The report's section on :data:`COOLED_LAW`: E (the fitted L∞), the exponents, the
    effective shares per weight and the backtest; ``rep.chinchilla["joint"]`` holds the fit."""
    if fit is None:
        rep.skipped[COOLED_LAW] = why
        return
    rep.chinchilla["joint"] = fit.to_json()
    for pair, reason in (fit.meta.get("failed_pairs") or {}).items():
        rep.skipped[f"{COOLED_LAW} {pair}"] = reason
    doc.h(2, "Converged loss from cooled-down budgets: L(N, D) across weights")
    doc.p("L_i(N, D; p) fitted per pair on the loss at the end of every cool-down — each run's "
          "own end and its branches' ends — with D the training target tokens of that budget, "
          "in one of two forms: additive, E_i + A_{p,i} N^−α_i + B_{p,i} D^−β_i (Caillaut eq. 2), "
          "or Kaplan's, E_i + [(A_{p,i}/N)^(α_i/β_i) + B_{p,i}/D]^β_i (Kaplan et al. 2020 eq. "
          "1.5 with an irreducible loss), both with the sharing of Fernandes eq. 7 (α_i, β_i and "
          "E_i shared by the weights of pair i). The pair's L∞ is the limit N, D → ∞, E_i: this "
          "is the fitted L∞ of the Regime section and of the checks. The L∞ of eq. 6/7 below is "
          "the asymptote in N of this training budget's final losses. "
          f"± is the sd over refits with 1% perturbed losses (footnote 5). {note}.")
    _selection_table(doc, fit)
    sd = fit.stderr or {}
    rows = []
    for pair in fit.pairs or []:
        k = {n: coef_key(n, pair) for n in ("E", "alpha", "beta")}
        true = (ground_truth or {}).get(pair)
        bt = (fit.backtest or {}).get(pair)
        rows.append([pair, format_number(fit.params[k["E"]], sd.get(k["E"])),
                     format_number(true),
                     "–" if not true else f"{fit.params[k['E']] / true - 1:+.1%}",
                     format_number(fit.params[k["alpha"]], sd.get(k["alpha"])),
                     format_number(fit.params[k["beta"]], sd.get(k["beta"])),
                     f"{fit.goodness[f'rmse_rel[{pair}]']:.2%}",
                     "–" if not bt else f"{bt['rmse_rel']:.2%}",
                     str((fit.meta.get("predicted_points") or {}).get(pair, 0))])
    doc.table(["pair", "E (fitted L∞)", "true L∞", "E / true − 1", "α (N)", "β (D)",
               "rmse (relative)", "backtest rmse", "points predicted"], rows)
    if any((fit.meta.get("predicted_points") or {}).values()):
        doc.p("Points predicted: cooled-down budgets not trained — branches a study left out "
              "(StudySpec.branch_checks), after an early stop, or a stopped run's own end — "
              "whose loss the LR-annealing law predicts from the run's curve "
              "(fitting.report.predicted_budgets), fitted like the trained ones; the backtest "
              "grades trained points only.")
    frows = []
    for pair in fit.pairs or []:
        for w in (fit.weights or {}).get(pair, []):
            frows.append([pair, f"{w:g}", f"{float(fit.fraction(w, pair, 'A')[0]):.3f}",
                          f"{float(fit.fraction(w, pair, 'B')[0]):.3f}"])
    doc.p("Effective shares per weight (cf. eq. 10): f(p) = (A_1/A_p)^(1/α) of the parameters, "
          "g(p) = (B_1/B_p)^(1/β) of the tokens in the additive form, A_1/A_p and B_1/B_p in "
          "Kaplan's (its scales are in parameters and tokens), relative to the largest weight; "
          "at an unfitted weight (a held-out run) they are interpolated linearly in p.")
    doc.table(["pair", "p", "f(p)", "g(p)"], frows)
    texts = [_backtest_text(pair, bt) for pair, bt in (fit.backtest or {}).items()]
    texts += [f"{pair}: no backtest ({why})."
              for pair, why in (fit.meta.get("backtest_failed") or {}).items()]
    if texts:
        doc.p("Backtest (Caillaut §4.1), leave the largest size out: " + " ".join(texts))
    intervals = _interval_texts(fit)
    if intervals:
        doc.p("Predictive intervals (fitting.intervals.cooled_law: refits on the smaller sizes' "
              "runs resampled within each size, the other form's prediction, a calibration "
              "error grown with log N — the inner backtest's with ≥ 4 smaller sizes, with "
              "three each run of the largest smaller size predicted without it (leave one run "
              "out, which replaces the refits and forms) — the seed noise below the held-out "
              "size; fixed before the held-out size is read): " + " ".join(intervals))
    rep.warnings += [f"{COOLED_LAW}: {m}" for m in fit.warnings]
    rep.warnings += [f"{COOLED_LAW} backtest {p}: outside {bt['tolerance']:.3g}× the noise"
                     for p, bt in (fit.backtest or {}).items() if bt["within"] is False]
