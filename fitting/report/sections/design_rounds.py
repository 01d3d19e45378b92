"""The report's section on an adaptive study's rounds: what each round trained, why, what it
cost, and the target's 95 % interval (a pair's E, or the K-pair recommendation's objective J)
before it and predicted after it; for E, a figure of the design law's last fit (iso-loss
contours) with the runs each round added.

The rounds are the study's records (mnmt.study.adaptive, OUT/design/rounds.jsonl), passed in
:attr:`fitting.report.options.ReportOptions.design_rounds`; the section compares the design's
last interval on E with the report's own (L(N, D) across weights) where both exist.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fitting.laws.budget.kaplan_nd import predict_kaplan
from fitting.plots.laws import plot_chinchilla_contours
from fitting.plots.style import save
from fitting.report.markdown import Document

__all__ = ["design_rounds_section", "STOP_REASONS"]

#: why the study stopped growing, as the report says it
STOP_REASONS = {
    "threshold": "the target's 95 % interval reached the threshold",
    "budget": "the compute budget is spent (no run of the pool fits in what is left)",
    "pool": "every run of the pool is trained",
}


def _interval(before: dict | None) -> str:
    if not before:
        return "–"
    value = before.get("E", before.get("J"))  # the estimate of E, or of the objective J
    if before.get("relative") is None or not before["relative"] <= 1:
        return "not identified" if value is None else f"{value:.4g}, not identified"
    return f"{value:.4g} [{before['lo95']:.4g}, {before['hi95']:.4g}] (±{before['relative']:.1%})"


def _row(record: dict, budget: float) -> list[str]:
    chosen = record.get("chosen") or []
    predicted = record.get("predicted_relative") or []
    return [str(record["round"]),
            ", ".join(f"`{c}`" for c in chosen) if chosen else
            f"stop: {record.get('stop', '–')}",
            record.get("why", "–"),
            f"{record.get('cost', 0.0):.3g} ({record.get('cost', 0.0) / budget:.0%})",
            f"{record.get('spent', 0.0) / budget:.0%}",
            _interval(record.get("before")),
            f"± {predicted[-1]:.1%}" if predicted and (predicted[-1] or 2) <= 1 else "–"]


def _not_reached(records: Sequence[dict], threshold: float, budget: float, name: str) -> str:
    """The sentence of a study that stopped short of its threshold: the width it reached and the
    narrowest of any round, each with the share of the budget spent before it."""
    widths = [(r["before"]["relative"], r["spent"] - r.get("cost", 0.0)) for r in records
              if (r.get("before") or {}).get("relative") is not None]
    if not widths:
        return (f"{name} never had an interval: the budget could not pin it to "
                f"±{threshold:.0%} (train larger sizes or longer runs: `adaptive_sizes`, "
                "`adaptive_budget`).")
    last, spent = widths[-1]
    best, at = min(widths)
    return (f"{name}'s interval did not reach ±{threshold:.0%} of log {name} within the budget: "
            f"±{last:.1%} with {spent / budget:.0%} of it spent, the narrowest ±{best:.1%} at "
            f"{at / budget:.0%}{_terms(records)} ({_what_would_narrow(records)}).")


def _calibrated(last: dict) -> bool:
    """Whether the interval is the calibration rule's (the objective J's: the held-out
    mixtures' error, the resampling and forms terms reported, not added)."""
    return last.get("rule") == "calibration" and bool(last.get("calibrated"))


def _what_would_narrow(records: Sequence[dict]) -> str:
    """Which of the last interval's terms keeps it wide, and what could narrow it: more runs
    for the resampling term; for the forms term, sizes beyond those trained (once the pool,
    `adaptive_sizes` included, is spent, only sizes beyond it); for a calibrated interval (the
    objective's), a law that predicts the held-out mixtures better."""
    last = _last_interval(records)
    if _calibrated(last):
        return ("the interval is the held-out mixtures' error of J: design runs narrow it only "
                "as far as the mixture law they refit predicts the held-out mixtures better, and "
                "more held-out mixtures (`heldout_mixtures`) only shrink its t quantile")
    resample, forms = last.get("sd_resample"), last.get("sd_forms")
    if resample is None or forms is None:
        return ("where the forms disagree, more grid runs do not narrow it; larger sizes may: "
                "`adaptive_sizes`")
    if resample >= forms:
        return ("the resampled runs keep it wide: more runs narrow it, a larger "
                "`adaptive_budget`")
    if records[-1].get("stop") == "pool":
        return ("the forms keep it wide, and every run of the pool, `adaptive_sizes` included, "
                "is trained: only sizes beyond the pool's can bring the forms together, and "
                "they may not")
    return ("the forms keep it wide: more runs of the sizes trained do not narrow it; larger "
            "sizes may: `adaptive_sizes`")


def _last_interval(records: Sequence[dict]) -> dict:
    """The last round's ``before`` record that has an interval ({} when none has)."""
    return next((r["before"] for r in reversed(records)
                 if (r.get("before") or {}).get("relative") is not None), {})


def _terms(records: Sequence[dict]) -> str:
    """``; at the end, sd of log E 0.05 from the resampled runs and 0.18 from the other
    form``: the two terms of the last interval, where the record has them."""
    last = _last_interval(records)
    if _calibrated(last) and last.get("sd_extrapolation") is not None:
        n = last.get("calibration_n")
        return (f"; at the end, the sd of the log is {last['sd_extrapolation']:.3f}, the held-out "
                f"mixtures' root mean square error of log J" + (f" over {n:.0f} runs" if n else "")
                + (f" (the resampled runs' {last['sd_resample']:.3f} and the other forms' "
                   f"{last['sd_forms']:.3f} are reported, not added)"
                   if last.get("sd_resample") is not None and last.get("sd_forms") is not None
                   else ""))
    if last.get("sd_resample") is None or last.get("sd_forms") is None:
        return ""
    return (f"; at the end, the sd of the log is {last['sd_resample']:.3f} from the resampled "
            f"runs and {last['sd_forms']:.3f} from the other form")


def _figure(records: Sequence[dict], out_dir: str) -> str | None:
    """Iso-loss contours of the design law's last fit at the largest weight, with each round's
    runs at (N, D) of their last budget; None before any fit."""
    fits = [r for r in records if r.get("theta")]
    if not fits or records[0].get("target", "E") != "E":
        return None
    theta, head = fits[-1]["theta"], records[0]
    n0, d0 = head["scale"]
    w = len(head["weights"])
    E, alpha, beta, A, B = theta[0], theta[1], theta[2], theta[2 + w], theta[2 + 2 * w]
    rounds: dict[int, list[tuple[float, float]]] = {}
    for record in records:
        for x in record.get("inputs") or []:
            rounds.setdefault(int(record["round"]), []).append((x[0] * n0, x[-2] * d0))
    pts = np.array([p for v in rounds.values() for p in v])
    panel = {"predict": lambda nn, dd: predict_kaplan(E, alpha, beta, A, B, nn / n0, dd / d0),
             "n_range": (pts[:, 0].min() / 1.5, pts[:, 0].max() * 1.5),
             "d_range": (pts[:, 1].min() / 1.5, pts[:, 1].max() * 1.5), "rounds": rounds}
    title = f"{head['pair']}, p = {head['weights'][-1]:g} (design law)"
    save(plot_chinchilla_contours({title: panel}, ncols=1),
         os.path.join(out_dir, "figures", "design_rounds.png"))
    return "figures/design_rounds.png"


def _intro(head: dict, budget: float) -> str:
    """What the rounds did, and what the budget counts."""
    if head.get("target") == "objective":
        text = ("This study grew adaptively: round 0 trained every design mixture at the smallest "
                "size; each later round fitted the design law (every pair's log loss across sizes "
                "and mixtures, eq. 11 with a transfer matrix) and, while the 95 % interval of the "
                "log of the recommendation's objective J at N = "
                f"{head['target_size']:.3g} (the report's: the mixture laws compared and the "
                f"recommendation made on the runs so far) was wider than ±{head['threshold']:.0%}, "
                "trained the grid runs that most shrink log J's predicted variance at the "
                "recommended weights per FLOP within the round's share of the budget "
                f"({budget:.3g} FLOPs).")
    else:
        text = (f"This study grew adaptively: round 0 trained an initial design; each later round "
                f"fitted the design law (L(N, D) across weights in Kaplan's form, E + "
                f"[(A_p/N)^(α/β) + B_p/D]^β, to log L of {head['pair']} at each cooled-down "
                f"budget of a run) and, while the 95 % interval of log E was wider than "
                f"±{head['threshold']:.0%}, trained the grid runs that most shrink E's predicted "
                f"variance per FLOP within the round's share of the budget ({budget:.3g} FLOPs).")
    if head.get("outside_budget") is not None:
        text += (f" The budget counts the design runs only: the seed repeats and the held-out "
                 f"runs ({head['outside_budget']:.3g} FLOPs) are trained besides it.")
    return text


def design_rounds_section(doc: Document, records: Sequence[dict], out_dir: str,
                          report_e: dict | None = None) -> dict[str, Any] | None:
    """Write the section; return its payload (the records and how the study stopped). None
    without records. ``report_e``: the report's own E interval of the target pair
    (``E_predictive`` of L(N, D) across weights: estimate, lo95, hi95), compared with the
    design's."""
    if not records:
        return None
    head, last = records[0], records[-1]
    budget = float(head["budget"])
    name = "J" if head.get("target") == "objective" else "E"
    doc.h(2, "Design rounds")
    doc.p(_intro(head, budget))
    doc.table(["round", "runs trained", "why", "FLOPs (of budget)", "spent after", f"{name} before "
               "(95 %)", "design law's interval after"], [_row(r, budget) for r in records])
    stop = last.get("stop")
    text = (f"Stopped: {STOP_REASONS.get(stop, stop)}." if stop else
            "Still growing: the last round's runs are not all trained.")
    if stop in ("budget", "pool"):
        text += " " + _not_reached(records, float(head["threshold"]), budget, name)
    if report_e and "lo95" in report_e and last.get("design"):
        text += (f" The report's own interval on {head['pair']}'s E (L(N, D) across weights, "
                 f"resampled runs and forms): {report_e['estimate']:.4g}, 95 % "
                 f"[{report_e['lo95']:.4g}, {report_e['hi95']:.4g}]; the design law's is "
                 f"{_interval(last['design'])} (linearised, its own residual noise).")
    doc.p(text)
    figure = _figure(records, out_dir)
    if figure:
        doc.img(figure, "The design law's last fit (iso-loss contours) and the runs each round "
                        "added, at their last budget.")
    return {"rounds": list(records), "stop": stop}
