"""The report's section on an adaptive study's rounds: what each round trained, why, what it
cost, and the target's 95 % interval before it and predicted after it; a figure of the design
law's last fit (iso-loss contours) with the runs each round added.

The rounds are the study's records (mnmt.study.adaptive, OUT/design/rounds.jsonl), passed in
:attr:`fitting.report.options.ReportOptions.design_rounds`; the section compares the design's
last interval on E with the report's own (L(N, D) across weights) where both exist.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from fitting.plots.laws import plot_chinchilla_contours
from fitting.plots.style import save
from fitting.report.markdown import Document

__all__ = ["design_rounds_section", "STOP_REASONS"]

#: why the study stopped growing, as the report says it
STOP_REASONS = {
    "threshold": "E's 95 % interval reached the threshold",
    "budget": "the compute budget is spent (no run of the pool fits in what is left)",
    "pool": "every run of the pool is trained",
}


def _interval(before: dict | None) -> str:
    if not before:
        return "–"
    if not before["relative"] <= 1:
        return f"{before['E']:.4g}, not identified"
    return f"{before['E']:.4g} ± {before['relative']:.1%}"


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
            f"± {predicted[-1]:.1%}" if predicted and predicted[-1] <= 1 else "–"]


def _figure(records: Sequence[dict], out_dir: str) -> str | None:
    """Iso-loss contours of the last fit of the design law with each round's runs at (N, D)
    of their last budget; None before any fit."""
    fits = [r for r in records if r.get("theta")]
    if not fits:
        return None
    E, A, alpha, B, beta = fits[-1]["theta"]
    points = [(int(r["round"]), np.asarray(x, float)) for r in records
              for x in r.get("inputs") or []]
    n = np.array([x[0] for _, x in points])
    d = np.array([x[-1] for _, x in points])
    rounds: dict[int, list[tuple[float, float]]] = {}
    for k, x in points:
        rounds.setdefault(k, []).append((float(x[0]), float(x[-1])))
    panel = {"predict": lambda nn, dd: E + A / nn ** alpha + B / dd ** beta,
             "n_range": (n.min() / 1.5, n.max() * 1.5), "d_range": (d.min() / 1.5, d.max() * 1.5),
             "rounds": rounds}
    fig = plot_chinchilla_contours({f"{records[0]['pair']} (design law)": panel}, ncols=1)
    save(fig, os.path.join(out_dir, "figures", "design_rounds.png"))
    return "figures/design_rounds.png"


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
    doc.h(2, "Design rounds")
    doc.p(f"This study grew adaptively: round 0 trained an initial design; each later round fitted "
          f"the design law ({head['law']}: L(N, D) = E + A/N^α + B/D^β of {head['pair']} at each "
          f"cooled-down budget of a run) and, while E's 95 % interval was wider than "
          f"±{head['threshold']:.0%} of E, trained the grid runs that most shrink E's predicted "
          f"variance per FLOP within the round's share of the budget ({budget:.3g} FLOPs).")
    doc.table(["round", "runs trained", "why", "FLOPs (of budget)", "spent after", "E before "
               "(95 %)", "predicted after"], [_row(r, budget) for r in records])
    stop = last.get("stop")
    text = (f"Stopped: {STOP_REASONS.get(stop, stop)}." if stop else
            "Still growing: the last round's runs are not all trained.")
    if report_e and "lo95" in report_e and last.get("before"):
        text += (f" The report's own interval on {head['pair']}'s E (L(N, D) across weights, "
                 f"resampled runs and forms): {report_e['estimate']:.4g}, 95 % "
                 f"[{report_e['lo95']:.4g}, {report_e['hi95']:.4g}]; the design law's is "
                 f"{_interval(last['before'])} (linearised, its own residual noise).")
    doc.p(text)
    figure = _figure(records, out_dir)
    if figure:
        doc.img(figure, "The design law's last fit (iso-loss contours) and the runs each round "
                        "added, at their last budget.")
    return {"rounds": list(records), "stop": stop}
