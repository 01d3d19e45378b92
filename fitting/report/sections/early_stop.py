"""The report's section "Early stop": each run's cooled-down end predicted from its curve up to
the stop, and how the predictions held on the runs trained to the end.

For a study stopped at a share f of each run's steps (``StudySpec.stop_fraction``), or any table
with learning-rate rows given f (``ReportOptions.stop_fraction``), per pair and fitted parent
run: the predicted end (:func:`fitting.laws.curves.early_stop.predict_stopped_end`, the curve
section's law), always marked predicted; its 80 / 95 % interval calibrated on the checks
(:func:`fitting.intervals.early_stop.calibrated_intervals`); for a check, the trained end, the
error, inside each interval and within k·σ_seed. Verdict per pair (:func:`verdict`): **holds**
when at least :data:`REQUIRED_SHARE` of the checked ends lie within k·σ_seed. ``fits.json
["early_stop"]``: the settings, ``pairs``, ``failed`` and the compute not trained. Every step of
the rule: docs/reference/laws.md, "Early stop".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.seed_noise import (
    SeedNoise,
    few_seeds_verdict,
    judges,
    judging_multiple,
    noise_fields,
)
from fitting.data.seeds import run_mixtures
from fitting.intervals.early_stop import calibrated_intervals
from fitting.intervals.predictive import coverage
from fitting.laws.curves.early_stop import (
    PLANNED_LR_METRIC,
    StoppedEnd,
    predict_stopped_end,
    stop_step,
    with_planned_rates,
)
from fitting.laws.curves.runs import Curve, curves_from_table, pair_training_curves
from fitting.report.markdown import Document
from fitting.report.record import Report
from fitting.report.sections.chinchilla import largest_size_seed_noises
from fitting.report.sections.extrapolation import (
    CURVE_FORM,
    CURVE_LAMBDA,
    FAILS,
    FROM_FRACTION,
    HOLDS,
    NO_NOISE,
    NOISE_MULTIPLE,
)
from fitting.report.view import StudyView

__all__ = ["REQUIRED_SHARE", "table_stop_fraction", "early_stop_ends", "verdict",
           "early_stop_payload", "early_stop_section"]

#: the share of checked ends that must lie within k·σ_seed of their trained ends
REQUIRED_SHARE = 0.8
_KEY = "early stop"


def table_stop_fraction(table: pd.DataFrame) -> float | None:
    """The stop fraction of a table's stopped runs (S/T, S their last logged rate, T their last
    planned one; the median over them), None without ``planned_learning_rate`` rows."""
    if "metric" not in table.columns:
        return None
    rates = table[table["metric"].isin(["learning_rate", PLANNED_LR_METRIC])]
    planned = rates[rates["metric"] == PLANNED_LR_METRIC]
    if planned.empty:
        return None
    runs = planned["run_id"].astype(str).unique()
    shares = []
    for run in runs:
        mine = rates[rates["run_id"].astype(str) == run]
        trained = mine.loc[mine["metric"] == "learning_rate", "step"]
        if len(trained):
            shares.append(float(trained.max()) / float(mine["step"].max()))
    return float(np.median(shares)) if shares else None


def _targets(view: StudyView, pair: str, runs: list[str]) -> dict[str, Curve]:
    """{run: its ``metric`` curve of ``pair`` on ``eval_set``} (the loss judged)."""
    table = view.table_fit
    rows = table[table["run_id"].astype(str).isin(runs)]
    try:
        return curves_from_table(rows, loss_metric=view.metric, pair=pair,
                                 eval_set=view.eval_set, loss_window=0, source="report")
    except FitError:
        return {}


def _experiments(table: pd.DataFrame) -> dict[str, tuple[str, str]]:
    """{run: (size, whole mixture)}: a run's seeds share one experiment."""
    frame = pd.DataFrame({"run": table["run_id"].astype(str), "mixture": run_mixtures(table),
                          "n": table["n"] if "n" in table.columns else np.nan})
    first = frame.groupby("run", sort=False).first()
    return {str(r): (f"{float(v.n):.6g}", str(v.mixture)) for r, v in first.iterrows()}


def early_stop_ends(view: StudyView, pair: str, fraction: float, *, lam: float = CURVE_LAMBDA
                    ) -> tuple[list[StoppedEnd], dict[str, str], str]:
    """(every predicted end of ``pair`` with its interval and, for a check, its trained end;
    {run: why not predicted}; why no interval, or "") — the module docstring's rule, the
    annealing law's momentum ``lam``."""
    table = view.table_fit
    curves = with_planned_rates(pair_training_curves(table, pair), table)
    parents = [r for r, c in curves.items() if not c.parent and c.steps.size]
    targets = _targets(view, pair, list(curves))
    ends, failed = [], {}
    for run in sorted(parents, key=lambda r: (np.nan_to_num(curves[r].n), r)):
        c = curves[run]
        end = float(c.lr_steps.max())
        try:
            e = predict_stopped_end(curves, run, stop_step(end, fraction), targets=targets,
                                    pair=pair, from_step=FROM_FRACTION * end, lam=lam,
                                    form=CURVE_FORM)
        except FitError as err:
            failed[run] = str(err)
            continue
        t = targets.get(run)
        if t is not None and t.steps.size and t.steps.max() >= e.end:
            e.measured = float(t.loss[np.searchsorted(t.steps, e.end)])
        ends.append(e)
    why = calibrated_intervals(ends, _experiments(table))
    return ends, failed, why


def verdict(within: list[bool], noise: SeedNoise | None) -> str:
    """:data:`HOLDS` when at least :data:`REQUIRED_SHARE` of ``within`` (checked ends within
    k·σ_seed) are true, :data:`FAILS` otherwise; information without a judging σ_seed, "not
    computed" without checks."""
    if not within:
        return "not computed: no run trained to its end to check against"
    if noise is None:
        return NO_NOISE
    if not judges(noise.dof):
        return few_seeds_verdict(noise.seeds, noise.dof)
    return HOLDS if np.mean(within) >= REQUIRED_SHARE else FAILS


def _entry(e: StoppedEnd, sigma: float | None, multiple: float = NOISE_MULTIPLE
           ) -> dict[str, Any]:
    iv = e.interval
    out: dict[str, Any] = {
        "run": e.run, "n": e.n, "stop_step": e.stop, "end_step": e.end, "predicted": e.predicted,
        "marked": "predicted", "offset": e.offset, "offset_points": e.offset_points,
        "branches_fitted": e.branches, "params": e.params, "warnings": e.warnings,
        "interval": None if iv is None else {k: getattr(iv, k) for k in
                                             ("lo80", "hi80", "lo95", "hi95", "sd_total",
                                              "calibrated", "calibration_n", "dof")},
        "check": e.measured is not None, "measured": e.measured, "error": e.error}
    if e.measured is not None:
        out["inside80"] = None if iv is None else iv.contains(e.measured, 0.80)
        out["inside95"] = None if iv is None else iv.contains(e.measured, 0.95)
        out["within_3sigma"] = None if sigma is None else bool(
            abs(e.error) <= multiple * sigma)
    return out


def _pair(view: StudyView, pair: str, fraction: float, lam: float) -> dict[str, Any]:
    """``fits.json["early_stop"]["pairs"][pair]``."""
    ends, failed, why = early_stop_ends(view, pair, fraction, lam=lam)
    if not ends:
        raise FitError("no run's end could be predicted: " + "; ".join(
            f"{r}: {w}" for r, w in list(failed.items())[:3]), column="loss")
    noise = largest_size_seed_noises(view.seeds)[0].get(pair)
    sigma = None if noise is None else noise.sigma
    multiple = judging_multiple(None if noise is None else noise.dof, NOISE_MULTIPLE)
    entries = [_entry(e, sigma, multiple) for e in ends]
    checks = [e for e in ends if e.measured is not None]
    within = [x["within_3sigma"] for x in entries if x["check"] and x["within_3sigma"]
              is not None]
    errors = np.array([e.error for e in checks], dtype=float)
    return {"ends": entries, "failed": failed, "interval_note": why,
            "n_predicted": len(ends), "n_checked": len(checks),
            "n_within": int(sum(within)), "fraction_within": float(np.mean(within))
            if within else None,
            "median_abs_error": float(np.median(np.abs(errors))) if errors.size else None,
            "worst_abs_error": float(np.max(np.abs(errors))) if errors.size else None,
            "coverage": coverage([(e.interval, e.measured) for e in checks
                                  if e.interval is not None]),
            "sigma": sigma, "multiple": multiple,
            "three_sigma": None if sigma is None else multiple * sigma,
            "sigma_source": "" if noise is None else noise.source,
            **noise_fields(None if noise is None else noise.seeds,
                           None if noise is None else noise.dof, sigma),
            "verdict": verdict(within, noise)}


def _not_trained(view: StudyView) -> tuple[int, int]:
    """(parent runs stopped, their run-steps not trained: T − S each) from the table's
    ``planned_learning_rate`` rows."""
    table = view.table_fit
    rates = table[table["metric"].isin(["learning_rate", PLANNED_LR_METRIC])]
    steps = rates.groupby([rates["run_id"].astype(str), "metric"])["step"].max().unstack()
    if PLANNED_LR_METRIC not in steps.columns:
        return 0, 0
    stopped = steps.dropna(subset=[PLANNED_LR_METRIC])
    return len(stopped), int((stopped[PLANNED_LR_METRIC] - stopped["learning_rate"]).sum())


def early_stop_payload(view: StudyView, fraction: float, *, lam: float = CURVE_LAMBDA
                       ) -> dict[str, Any]:
    """``fits.json["early_stop"]`` (module docstring), the annealing law's momentum ``lam``."""
    n_stopped, saved = _not_trained(view)
    out: dict[str, Any] = {"stop_fraction": float(fraction), "law": "lr_annealing",
                           "form": CURVE_FORM, "lam": float(lam),
                           "from_fraction": FROM_FRACTION, "required_share": REQUIRED_SHARE,
                           "noise_multiple": NOISE_MULTIPLE,
                           "calibration": "RMS log error of the checks' own predictions at "
                           "the stop, leaving out the run's experiment (a check) — all checks "
                           "for a stopped run", "runs_stopped": n_stopped,
                           "run_steps_not_trained": saved, "pairs": {}, "skipped": {}}
    for pair in view.points:
        try:
            out["pairs"][pair] = _pair(view, pair, fraction, lam)
        except FitError as e:
            out["skipped"][pair] = str(e)
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None or not np.isfinite(x) else f"{x:.2%}"


def _cov(d: dict[str, Any], level: str) -> str:
    c = d["coverage"].get(level) or {}
    return "–" if not c.get("n") else f"{c['inside']}/{c['n']}"


def early_stop_section(doc: Document, rep: Report, view: StudyView,
                       fraction: float | None) -> dict[str, Any] | None:
    """Write the section into ``doc`` and return ``fits.json["early_stop"]``; None (nothing
    written) without a stop fraction — given, or read from the table's stopped runs."""
    fraction = fraction if fraction is not None else table_stop_fraction(view.table_fit)
    if fraction is None or fraction >= 1.0:
        return None
    out = early_stop_payload(view, fraction)
    for pair, why in out["skipped"].items():
        rep.skipped[f"{_KEY} {pair}"] = why
    doc.h(2, f"Early stop: cooled-down ends predicted from {fraction:.0%} of each run")
    doc.p(f"Each run's end — the {view.eval_set} {view.metric} of the pair at its last step, "
          "after its cool-down — is **predicted** from its curve up to the stop (the "
          f"LR-annealing law, {CURVE_FORM} form, λ = {CURVE_LAMBDA:g}, fitted on the pair's "
          f"probe loss where the table has it, else its training loss, from "
          f"{FROM_FRACTION:.0%} of the steps to the stop and on the run's "
          "cool-down branches that left before it, plus the median gap to the judged loss on "
          "those steps). The size laws read trained ends only; L(N, D) across weights takes "
          "a stopped run's end and its branches after the stop by the same rule, marked "
          "predicted. The interval is calibrated on the runs trained to the end (the checks), "
          "each check's without its own experiment. Verdict: holds when at least "
          f"{REQUIRED_SHARE:.0%} of the checked ends lie within {NOISE_MULTIPLE:g}σ_seed of "
          "their trained ends (σ_seed the relative seed sd at the largest size repeated; "
          "information from fewer than 3 seeds). "
          + (f"{out['runs_stopped']} runs stopped: {out['run_steps_not_trained']:,} of their "
             "steps not trained (their branches after the stop are neither trained nor "
             "predicted)." if out["runs_stopped"] else "No run of this table was stopped: each "
             "is cut at its stop as if stopped, and every end is a check."))
    if not out["pairs"]:
        return out
    doc.table(["pair", "predicted", "checked", f"within {NOISE_MULTIPLE:g}σ_seed",
               "inside 80 %", "inside 95 %", "median |error|", "worst |error|", "σ_seed",
               "verdict"],
              [[pair, str(d["n_predicted"]), str(d["n_checked"]),
                f"{d['n_within']}/{d['n_checked']}" if d["sigma"] is not None else "–",
                _cov(d, "0.80"), _cov(d, "0.95"), _pct(d["median_abs_error"]),
                _pct(d["worst_abs_error"]),
                _pct(d["sigma"]) + ("" if d["sigma_dof"] is None else
                                    f" ({d['sigma_seeds']} seeds, {d['sigma_dof']} dof)"),
                d["verdict"]] for pair, d in out["pairs"].items()])
    rows = []
    for pair, d in out["pairs"].items():
        for e in d["ends"]:
            iv = e["interval"]
            rows.append([pair, e["run"], f"{e['stop_step']} → {e['end_step']}",
                         f"{e['predicted']:.4f} (predicted)",
                         "–" if iv is None else f"{iv['lo80']:.4f}–{iv['hi80']:.4f}",
                         "–" if e["measured"] is None else f"{e['measured']:.4f}",
                         _pct(e["error"]) if e["check"] else "not trained",
                         {True: "yes", False: "**no**", None: "–"}[e.get("within_3sigma")]])
    doc.table(["pair", "run", "stop → end", "end", "80 % interval", "trained end", "error",
               f"within {NOISE_MULTIPLE:g}σ_seed"], rows)
    notes = [f"{pair}: {d['interval_note']}" for pair, d in out["pairs"].items()
             if d["interval_note"]]
    notes += [f"{pair} {r}: {w}" for pair, d in out["pairs"].items()
              for r, w in d["failed"].items()]
    if notes:
        doc.p("Not predicted or without an interval: " + "; ".join(notes) + ".")
    return out
