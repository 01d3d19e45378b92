"""The report's regime: are the trained runs near convergence — the capacity-limited regime the
laws of Fernandes et al. describe — or compute-limited, and how far are their best losses from L∞?

:func:`compute_regime` judges convergence from cool-down branches (Hägele et al. 2024) or the
slope before the cool-down (its docstring: the two methods); :func:`regime_section` writes the
section; :func:`fitted_l_inf` says which law gives the fitted L∞ the regime reads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fitting.data.tables import has_branches, without_branches
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit, e_bound
from fitting.laws.curves.learning_curve import (
    convergence_check,
    cooldown_budgets,
    cooldown_start,
    cooled_drop_per_doubling,
)
from fitting.report.markdown import Document, format_number
from fitting.report.sections.chinchilla import COOLED_LAW

__all__ = ["CONVERGED_DROP", "METHOD_BRANCHES", "METHOD_SLOPE", "LAW_JOINT", "LAW_POWER",
           "trained_rows", "gap_phrase", "fitted_l_inf", "slope_curves", "cooled_curves",
           "compute_regime", "regime_section"]

#: a cooled-down curve is converged when its loss falls by less than this fraction per doubling
#: of the token budget D (1 %, the noise level of Fernandes et al. footnote 5)
CONVERGED_DROP = 0.01
METHOD_BRANCHES = "cooled-down branches"
METHOD_SLOPE = "slope before the cool-down"
#: the laws of one training budget whose L∞ is the fitted one without cool-down branches
LAW_JOINT = "joint law (eq. 7)"
LAW_POWER = "median of the per-weight power laws (eq. 6)"


def trained_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of pairs their run trains: a pair at weight 0 is evaluated, not learned, so its
    curve is neither a learning curve for the regime nor one to draw."""
    if "weight" not in rows.columns:
        return rows
    return rows[~(pd.to_numeric(rows["weight"], errors="coerce") <= 0)]


def gap_phrase(ratio: float, of: str) -> str:
    """best / L∞ as a reader says it: "4.2 % above L∞" below 2×, "3.1× L∞" from 2× on (a ratio
    printed to two digits, "1×", hides a 4 % gap)."""
    if ratio < 2:
        pct = (ratio - 1) * 100
        return f"{pct:.2g} % above {of}" if pct < 10 else f"{pct:.0f} % above {of}"
    return f"{ratio:.2g}× {of}"


def fitted_l_inf(pairs: list[str], *, branches: bool, cooled: JointChinchillaFit | None,
                 cooled_why: str, joint: Any, power_fits: dict[str, dict],
                 lowest: dict[str, float]) -> dict[str, Any]:
    """The fitted L∞ per pair and the law it comes from, never another law's in its place.

    With cool-down branches (``branches``) the law asked for is :data:`COOLED_LAW` (L(N, D) across
    weights on the cooled-down budgets; ``cooled``, or None and ``cooled_why``), whose limit
    N, D → ∞ is E: a pair it did not fit has no fitted L∞, and ``info[pair]["l_inf_missing"]``
    says why; eq. 7's L∞ (else the median of the per-weight eq. 6 fits) is this budget's
    asymptote, kept as such (``budget``). Without branches the law asked for is eq. 7
    (:data:`LAW_JOINT`), and the median of eq. 6 (:data:`LAW_POWER`) stands in, named, where eq. 7
    was not fitted. ``info[pair]["l_inf_is_bound"]``: the value is a bound, not an estimate
    (:func:`fitting.laws.budget.chinchilla_joint.e_bound`: at 0, or at or above ``lowest[pair]``,
    the lowest loss fitted, for eq. 6/7; the cooled-down law's own flag for E).

    Returns ``{"law": the law asked for, "l_inf": {pair: (value, source)}, "budget": {pair:
    (value, source)}, "power": {pair: median of eq. 6}, "info": {pair: {...}}}``.

    It says which law gives the fitted L∞ the regime reads (``regime["l_inf_law"]``),
    per pair the law that did (``l_inf_law``), whether its value is a bound rather than an estimate
    (``l_inf_is_bound``) and, where the law asked for could not fit the pair, why
    (``l_inf_missing``): with cool-down branches that law is L(N, D) across weights on the
    cooled-down budgets, and no other law's L∞ takes its place."""
    out: dict[str, Any] = {"law": COOLED_LAW if branches else LAW_JOINT, "l_inf": {},
                           "budget": {}, "power": {}, "info": {}}
    for pair in pairs:
        if power_fits.get(pair):
            out["power"][pair] = float(np.median([f.params["l_inf"]
                                                  for f in power_fits[pair].values()]))
        if joint is not None and f"l_inf[{pair}]" in joint.params:
            out["budget"][pair] = (float(joint.params[f"l_inf[{pair}]"]), LAW_JOINT, LAW_JOINT)
        elif pair in out["power"]:
            out["budget"][pair] = (out["power"][pair], f"{LAW_POWER}; the joint law was not "
                                   "fitted", LAW_POWER)
        info: dict[str, Any] = {}
        if branches and cooled is not None and pair in (cooled.pairs or []):
            bound = cooled.e_is_bound(pair)
            source = f"{COOLED_LAW}, its limit N, D → ∞ (E)" + (
                ": a bound (E at the lowest loss measured or at 0), not an estimate"
                if bound else "")
            out["l_inf"][pair] = (cooled.l_inf(pair), source)
            info.update(l_inf_law=COOLED_LAW, l_inf_is_bound=bool(bound))
        elif branches:
            why = ((cooled.meta.get("failed_pairs") or {}).get(pair, "the pair was not fitted")
                   if cooled is not None else cooled_why)
            info["l_inf_missing"] = f"{COOLED_LAW} could not be fitted: {why}"
        elif pair in out["budget"]:
            value, source, law = out["budget"][pair]
            out["l_inf"][pair] = (value, source)
            info.update(l_inf_law=law, l_inf_is_bound=e_bound(
                value, [lowest.get(pair, np.inf)]) is not None)
        out["info"][pair] = info
    out["budget"] = {p: v[:2] for p, v in out["budget"].items()}
    return out


def _pairs(fin: pd.DataFrame, l_inf: dict[str, tuple[float, str]],
           ground_truth: dict[str, float] | None,
           l_inf_power: dict[str, float] | None,
           l_inf_budget: dict[str, tuple[float, str]] | None = None,
           l_inf_info: dict[str, dict[str, Any]] | None = None
           ) -> dict[str, dict[str, Any]]:
    """pair -> best final loss, the fitted (and true) L∞, best / L∞, what ``l_inf_info`` says of
    the fitted L∞ (:func:`fitted_l_inf`) and, when the fitted L∞ is not this budget's, this
    budget's asymptote (``l_inf_budget``, ``l_inf_budget_source``)."""
    out: dict[str, dict[str, Any]] = {}
    for pair, sub in fin.groupby("pair"):
        best = float(sub["value"].min())
        d: dict[str, Any] = {"best_loss": best, **(l_inf_info or {}).get(str(pair), {})}
        value, source = l_inf.get(pair, (float("nan"), ""))
        if math.isfinite(value) and value > 0:
            d["l_inf_fit"] = value
            d["l_inf_source"] = source
            d["gap_over_fit"] = best / value
        if l_inf_budget and pair in l_inf_budget and math.isfinite(l_inf_budget[pair][0]):
            d["l_inf_budget"] = float(l_inf_budget[pair][0])
            d["l_inf_budget_source"] = f"{l_inf_budget[pair][1]}, on this budget's final losses"
        if l_inf_power and pair in l_inf_power and math.isfinite(l_inf_power[pair]):
            d["l_inf_power_median"] = float(l_inf_power[pair])
        if ground_truth and pair in ground_truth:
            d["l_inf_true"] = float(ground_truth[pair])
            d["gap_over_true"] = best / float(ground_truth[pair])
        out[str(pair)] = d
    return out


def slope_curves(table: pd.DataFrame, eval_set: str, metric: str
                 ) -> tuple[dict[str, dict], dict[str, float]]:
    """``("run/pair" -> convergence_check result, run -> cool-down start step)`` of every
    (run, trained pair) learning curve with ≥ 3 evaluations, each judged before its run's
    learning-rate cool-down when ≥ 3 evaluations lie before it."""
    curves: dict[str, dict] = {}
    if not {"run_id", "step", "eval_set", "metric"} <= set(table.columns):
        return curves, {}
    series = table[(table["eval_set"] == eval_set) & (table["metric"] == metric)]
    rates = table[table["metric"] == "learning_rate"]
    cooldown = {run: cooldown_start(g["step"], g["value"]) for run, g in rates.groupby("run_id")}
    for (run, pair), g in trained_rows(series).groupby(["run_id", "pair"]):
        g = g[(g["step"] > 0) & (g["value"] > 0)].sort_values("step")
        start = cooldown.get(run)
        if start is not None and (g["step"] <= start).sum() >= 3:
            g = g[g["step"] <= start]  # judged before the cool-down (cooldown_start)
        if len(g) < 3:
            continue
        chk = convergence_check(g["step"].to_numpy(float), g["value"].to_numpy(float))
        chk["checked_until_step"] = float(g["step"].max())
        curves[f"{run}/{pair}"] = chk
    return curves, {run: s for run, s in cooldown.items() if s is not None}


def cooled_curves(table: pd.DataFrame, eval_set: str, metric: str,
                  budgets: pd.DataFrame | None = None) -> tuple[dict[str, dict[str, dict]], int]:
    """``(runs, n_single)``: ``runs[parent run][pair] = {"budgets": [[D, loss], …],
    "cooled_drop_per_doubling": x, "converged": x < CONVERGED_DROP}`` for every parent run and
    trained pair with ≥ 2 cooled-down budgets (Hägele et al. 2024), and the number of (run, pair)
    with one budget only (not judged). Branch ends with invalid values are left out.
    ``budgets``: ``table``'s cooled-down budgets already derived
    (:attr:`fitting.report.view.StudyView.budgets`), else derived here."""
    if budgets is None:
        budgets = cooldown_budgets(table, eval_set=eval_set, metric=metric, drop_invalid=True)
    budgets = trained_rows(budgets)
    runs: dict[str, dict[str, dict]] = {}
    n_single = 0
    for (parent, pair), g in budgets.groupby(["parent", "pair"], sort=True):
        g = g.drop_duplicates("tokens", keep="last")
        if len(g) < 2:
            n_single += 1
            continue
        d, y = g["tokens"].to_numpy(float), g["value"].to_numpy(float)
        drop = cooled_drop_per_doubling(d, y)
        runs.setdefault(str(parent), {})[str(pair)] = {
            "budgets": [[float(a), float(b)] for a, b in zip(d, y, strict=True)],
            "cooled_drop_per_doubling": drop, "converged": bool(drop < CONVERGED_DROP)}
    return runs, n_single


def _far_text(gaps: list[float]) -> str:
    if gaps and max(gaps) > 1.5:
        return (f" The best losses are still {gap_phrase(max(gaps), 'the')} (fitted or true) "
                "irreducible loss: the models are far from L∞, and L∞ is an extrapolation.")
    if gaps and max(gaps) >= 1:
        return f" The best losses are at most {gap_phrase(max(gaps), 'L∞')}."
    if gaps:
        return (f" Every best loss lies below its L∞ (best / L∞ at most {max(gaps):.3g}): "
                "the fitted or stated L∞ is too high.")
    return ""


def _slope_verdict(n_curves: int, n_drop: int) -> tuple[str, str]:
    if n_curves and n_drop / n_curves > 0.5:
        return "compute-limited", (
            f"{n_drop} of {n_curves} learning curves still drop by more than 1% per doubling of "
            "training steps at their end: the runs are not converged, so the fitted laws "
            "describe this training budget rather than the capacity-limited regime of "
            "Fernandes et al. (models trained to near convergence).")
    if n_curves:
        text = (f"{n_curves - n_drop} of {n_curves} learning curves have flattened (< 1% loss "
                "drop per doubling of steps at the end): the runs are near convergence, the "
                "capacity-limited regime the laws describe.")
    else:
        return "unknown", "No learning curves (only final values) — convergence could not be checked."
    return "near convergence", text


def _branch_verdict(runs: dict[str, dict[str, dict]], n_single: int) -> tuple[str, str]:
    drops = [c["cooled_drop_per_doubling"] for by_pair in runs.values() for c in by_pair.values()]
    n_curves = len(drops)
    n_drop = sum(1 for x in drops if not x < CONVERGED_DROP)
    single = (f" {n_single} (run, pair) with one cooled-down budget only are not judged."
              if n_single else "")
    if not n_curves:
        return "unknown", ("The table has cool-down branches, but no trained (run, pair) has two "
                           "cooled-down budgets: convergence could not be checked." + single)
    how = (f"per doubling of the token budget D between their last two cooled-down budgets "
           f"(median {np.median(drops):.2%}; threshold {CONVERGED_DROP:.0%}; cool-down branches, "
           "Hägele et al. 2024)")
    if n_drop / n_curves > 0.5:
        return "compute-limited", (
            f"{n_drop} of {n_curves} cooled-down curves (run, trained pair) still lose "
            f"{CONVERGED_DROP:.0%} or more of their loss {how}: the runs are not converged, so "
            "the fitted laws describe this training budget rather than the capacity-limited "
            "regime of Fernandes et al." + single)
    return "near convergence", (
        f"{n_curves - n_drop} of {n_curves} cooled-down curves (run, trained pair) lose less than "
        f"{CONVERGED_DROP:.0%} of their loss {how}: the runs are near convergence, the "
        "capacity-limited regime the laws describe." + single)


def compute_regime(table: pd.DataFrame, fin: pd.DataFrame, l_inf: dict[str, tuple[float, str]],
                   ground_truth: dict[str, float] | None, eval_set: str, metric: str,
                   l_inf_power: dict[str, float] | None = None,
                   l_inf_budget: dict[str, tuple[float, str]] | None = None,
                   l_inf_info: dict[str, dict[str, Any]] | None = None, *,
                   budgets: pd.DataFrame | None = None) -> dict[str, Any]:
    """Regime of the trained runs (how it is judged: below).

    ``fin``: the final rows (best losses per pair); ``l_inf[pair] = (value, source)``: the joint
    law's L∞ (eq. 7) when it was fitted, else the median of the per-weight eq. 6 fits
    (``l_inf_source`` says which); ``l_inf_power`` (that median) is kept as
    ``l_inf_power_median`` for comparison. ``l_inf_budget[pair] = (value, source)``: where the
    fitted L∞ is the limit of L(N, D) on cooled-down budgets, the asymptote of eq. 6/7 on this
    budget's final losses, kept as ``l_inf_budget``. ``l_inf_info[pair]``: the fields of
    :func:`fitted_l_inf` (``l_inf_law``, ``l_inf_is_bound``, ``l_inf_missing``) copied into the
    pair's entry. Keys: ``pairs``, ``method``, ``curves`` (slope
    method), ``cooldown_starts``, ``n_curves`` and ``n_still_dropping`` (of the method used),
    ``verdict``, ``far_from_l_inf``, ``text``; with branches also ``runs``
    (:func:`cooled_curves`), ``converged_drop``, ``median_cooled_drop_per_doubling``,
    ``n_single_budget``, ``slope_n_curves`` and ``slope_n_still_dropping``. ``budgets``:
    ``table``'s cooled-down budgets where already derived (:func:`cooled_curves`).

    :func:`compute_regime` judges convergence by one of two methods (``regime["method"]``):

    * ``"cooled-down branches"``, when the table has cool-down branches (schema revision 1.2;
      Hägele et al. 2024, *Scaling Laws and Compute-Optimal Training Beyond Fixed Training
      Durations*): per parent run and trained pair (weight > 0), the cooled-down budgets — the run's
      own final loss and each branch's final loss against the token budget D
      (:func:`fitting.laws.curves.learning_curve.cooldown_budgets`) — and the relative drop of the loss per
      doubling of D between the last two of them
      (:func:`fitting.laws.curves.learning_curve.cooled_drop_per_doubling`). A curve is converged when that
      drop is below :data:`CONVERGED_DROP`; the runs are compute-limited when more than half of the
      curves are not.
    * ``"slope before the cool-down"``, otherwise: the local log-log slope of each (run, trained
      pair) learning curve at its end (:func:`fitting.laws.curves.learning_curve.convergence_check`), judged
      before the run's learning-rate cool-down (:func:`fitting.laws.curves.learning_curve.cooldown_start`).

    The slope curves (``regime["curves"]``) are computed in both cases, for comparison; with branches
    on the ordinary runs only (a branch's own curve is a cool-down). :func:`regime_section` writes
    the report's "Regime" section."""
    reg: dict[str, Any] = {"pairs": _pairs(fin, l_inf, ground_truth, l_inf_power, l_inf_budget,
                                           l_inf_info)}
    branches = has_branches(table)
    curves, cooldown = slope_curves(without_branches(table), eval_set, metric)
    n_slope = len(curves)
    n_slope_drop = sum(bool(c["still_dropping"]) for c in curves.values())
    reg.update(curves=curves, cooldown_starts=cooldown)
    if branches:
        runs, n_single = cooled_curves(table, eval_set, metric, budgets)
        drops = [c["cooled_drop_per_doubling"] for p in runs.values() for c in p.values()]
        verdict, text = _branch_verdict(runs, n_single)
        reg.update(method=METHOD_BRANCHES, runs=runs, converged_drop=CONVERGED_DROP,
                   median_cooled_drop_per_doubling=float(np.median(drops)) if drops else None,
                   n_single_budget=n_single, n_curves=len(drops),
                   n_still_dropping=sum(1 for x in drops if not x < CONVERGED_DROP),
                   slope_n_curves=n_slope, slope_n_still_dropping=n_slope_drop)
        if n_slope:
            text += (f" For comparison, the slope before the cool-down finds {n_slope_drop} of "
                     f"{n_slope} learning curves of the parent runs still dropping by more than "
                     "1% per doubling of steps.")
    else:
        verdict, text = _slope_verdict(n_slope, n_slope_drop)
        reg.update(method=METHOD_SLOPE, n_curves=n_slope, n_still_dropping=n_slope_drop)
        if n_slope and cooldown:
            text += (f" {len(cooldown)} runs end with a learning-rate cool-down; their curves "
                     "are judged before it (its drop anneals gradient noise, it is not "
                     "learning).")
    gaps = [d.get("gap_over_true", d.get("gap_over_fit")) for d in reg["pairs"].values()]
    gaps = [g for g in gaps if g is not None]
    reg.update(verdict=verdict, far_from_l_inf=bool(gaps) and max(gaps) > 1.5,
               text=text + _far_text(gaps))
    return reg


def _method_text(regime: dict[str, Any]) -> str:
    if regime.get("method") == METHOD_BRANCHES:
        return ("Method: cooled-down branches (Hägele et al. 2024). For each run and trained "
                "pair, the loss at the end of every cool-down to learning rate 0 — the run's own "
                "end and each of its branches' ends — against the token budget D; drop per "
                "doubling = (L_prev − L_last) / L_prev / log2(D_last / D_prev) between the last "
                f"two budgets; a curve is converged below {CONVERGED_DROP:.0%}, the runs are "
                "compute-limited when more than half of the curves are not.")
    return ("Method: slope before the cool-down. For each run and trained pair, the local "
            "log-log slope of the learning curve over its last half (in log step), before any "
            "learning-rate cool-down; still dropping above 1% loss per doubling of steps; the "
            "runs are compute-limited when more than half of the curves still drop.")


def regime_section(doc: Document, regime: dict[str, Any], heldout: bool = False,
                   max_rows: int = 20) -> None:
    """The report's "Regime" section: verdict, method, best loss against L∞ per pair and, with
    branches, the cooled-down curves with the largest drop first (at most ``max_rows``)."""
    doc.h(2, "Regime")
    doc.p(f"**{regime['verdict']}.** {regime['text']}")
    doc.p(_method_text(regime))
    rows = []
    budget = any("l_inf_budget" in d for d in regime["pairs"].values())
    for pair, d in regime["pairs"].items():
        rows.append([pair, format_number(d["best_loss"]), format_number(d.get("l_inf_fit")),
                     *([format_number(d.get("l_inf_budget"))] if budget else []),
                     format_number(d.get("l_inf_true")),
                     format_number(d.get("gap_over_fit"), digits=3),
                     format_number(d.get("gap_over_true"), digits=3)])
    doc.table(["pair", "best loss", "fitted L∞", *(["this budget's L∞"] if budget else []),
               "true L∞", "best / fitted L∞", "best / true L∞"], rows)
    srcs = sorted({d["l_inf_source"] for d in regime["pairs"].values() if "l_inf_source" in d})
    bsrcs = sorted({d["l_inf_budget_source"] for d in regime["pairs"].values()
                    if "l_inf_budget_source" in d})
    if srcs:
        doc.p("Fitted L∞: " + "; ".join(srcs) + "." + (
            " This budget's L∞: " + "; ".join(bsrcs) + " (the asymptote in N at the trained "
            "budget, above the converged loss while the runs are compute-limited)." if bsrcs
            else "") + (
            " Best losses and learning curves include the held-out runs." if heldout else ""))
    missing = [f"{pair}: {d['l_inf_missing']}" for pair, d in regime["pairs"].items()
               if d.get("l_inf_missing")]
    if missing:
        doc.p("No fitted L∞ (no other law's takes its place): " + "; ".join(missing) + ".")
    curves = [(run, pair, c) for run, by_pair in (regime.get("runs") or {}).items()
              for pair, c in by_pair.items()]
    if not curves:
        return
    curves.sort(key=lambda t: (-round(t[2]["cooled_drop_per_doubling"], 6), t[0], t[1]))
    table = []
    for run, pair, c in curves[:max_rows]:
        (d0, l0), (d1, l1) = c["budgets"][-2], c["budgets"][-1]
        table.append([run, pair, f"{d0:.3g}", format_number(l0), f"{d1:.3g}", format_number(l1),
                      f"{c['cooled_drop_per_doubling']:.2%}", "yes" if c["converged"] else "no"])
    doc.table(["run", "pair", "D prev", "loss at D prev", "D last", "loss at D last",
               "drop per doubling", "converged"], table)
    if len(curves) > max_rows:
        doc.p(f"(the {max_rows} of {len(curves)} cooled-down curves with the largest drop)")
