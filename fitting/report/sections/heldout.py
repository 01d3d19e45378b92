"""Held-out runs: trained, never fitted, predicted by the fitted laws (the report's check of
prediction on what the fits never saw).

:func:`fitting.report.writer.write_report` removes the held-out runs' rows from every fit and
:func:`heldout_section` compares each held-out experiment's (its seeds') mean final loss per pair
with L(N, D) across weights at its own N and D (the law the report leads with, where the table
has cool-down branches), eq. 11 with the fitted f̂, and at a fitted weight the joint law and
the per-weight power law. The rule (:func:`heldout_within`): |error| ≤ 2 % or |predicted −
measured| ≤ 3σ_seed, σ_seed measured seed noise (the experiment's own seeds, else the study's
at its largest repeated size), whose clause judges only from 3 seeds on. L(N, D)'s entries get
their predictive intervals (:mod:`fitting.intervals.heldout`). Entries and fields:
docs/guides/fitting.md, "Held-out runs (predicted, never fitted)".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.core.seed_noise import MIN_DOF, SeedNoise, noise_fields
from fitting.data.seeds import experiment_groups
from fitting.data.tables import last_evaluations_sd
from fitting.intervals.eq11 import mark_eq11_heldout
from fitting.intervals.heldout import heldout_predictive
from fitting.intervals.predictive import (
    LEVELS,
    UNINFORMATIVE_FACTOR,
    band_factor,
    coverage_text,
    informative,
)
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit
from fitting.report.markdown import Document, format_number
from fitting.report.record import Report
from fitting.report.sections.chinchilla import (
    COOLED_LAW,
    chinchilla_points,
    largest_size_seed_noises,
)
from fitting.report.view import StudyView, check_heldout_runs

__all__ = ["REL_TOLERANCE", "NOISE_TOLERANCE", "heldout_within", "check_heldout_runs",
           "heldout_experiments",
           "heldout_noise", "predict_heldout", "heldout_section"]

#: |error| within this fraction of the measured loss is within tolerance
REL_TOLERANCE = 0.02
#: … or |predicted − measured| within this many measured seed sds
NOISE_TOLERANCE = 3.0
#: ``noise_source`` of an experiment judged against the study's seed noise / against none
STUDY_NOISE = "study seed noise"
NO_NOISE = "none"
_SAME_WEIGHT = 1e-6


def heldout_experiments(held: pd.DataFrame, curve_sd: dict[tuple[str, str], float]
                        ) -> list[dict[str, Any]]:
    """The final rows ``held`` of held-out runs as experiments: one dict per (experiment, pair),
    its runs being the seeds of one experiment (:func:`fitting.data.seeds.experiment_groups`:
    K-pair runs that share one pair's weight but not the others' are two experiments), with
    ``measured`` (their mean), ``measured_runs``, ``seed_sd`` (ddof = 1; None for one seed),
    ``curve_sd`` (the largest of its runs') and the run's N, weight and final tokens."""
    if held.empty:
        return []
    out = []
    for _, g in experiment_groups(held):
        g = g.sort_values("run_id")
        runs = [str(r) for r in g["run_id"]]
        values = g["value"].to_numpy(float)
        first = g.iloc[0]
        pair = str(first["pair"])
        sds = [curve_sd[(r, pair)] for r in runs if (r, pair) in curve_sd]
        out.append({"run": runs[0], "runs": runs, "seeds": len(runs), "pair": pair,
                    "size": str(first.get("size", "")),
                    "n": float(first["n"]),
                    "weight": float(first["weight"]) if "weight" in g.columns else float("nan"),
                    "tokens": float(first["tokens"]) if "tokens" in g.columns else float("nan"),
                    "measured": float(values.mean()),
                    "measured_runs": dict(zip(runs, map(float, values), strict=True)),
                    "seed_sd": float(values.std(ddof=1)) if len(values) >= 2 else None,
                    "curve_sd": max(sds) if sds else None})
    return sorted(out, key=lambda e: (e["run"], e["pair"]))


def heldout_noise(exp: dict[str, Any], spread: dict) -> dict[str, Any]:
    """σ_seed of a held-out experiment from :func:`heldout_experiments`: ``{"noise",
    "noise_source", "noise_seeds", "noise_dof", "noise_ci90", "noise_judges",
    "noise_detail"}`` — its own seeds' sd, else the study's seed noise for the pair
    (``spread``: :func:`fitting.data.seeds.seed_spread` of the fitted runs), else none (the
    module docstring); ``noise_ci90`` its χ² 90 % interval in nats and ``noise_judges``
    whether it rests on enough seeds to judge (:func:`fitting.core.seed_noise.judges`)."""
    k = exp["seeds"]
    if k >= 2:
        own = SeedNoise(exp["seed_sd"], k, k - 1, f"heldout seeds (n={k})")
        return _noise_entry(own, f"sd of the held-out run's {k} seeds ({k - 1} dof)")
    rel, n_at = largest_size_seed_noises(spread)
    pair = exp["pair"]
    if pair in rel:
        r = rel[pair]
        return _noise_entry(r.scaled(exp["measured"], STUDY_NOISE),
                            f"the study's relative seed sd {r.sigma:.2%} for {pair} at "
                            f"N = {n_at:.3g} ({r.seeds} seeds, {r.dof} dof) × the measured loss")
    return {"noise": None, "noise_source": NO_NOISE,
            **noise_fields(None, None, None, prefix="noise"), "noise_judges": False,
            "noise_detail": "no seed noise measured: the 2 % clause alone"}


def _noise_entry(noise: SeedNoise, detail: str) -> dict[str, Any]:
    return {"noise": noise.sigma, "noise_source": noise.source,
            **noise_fields(noise.seeds, noise.dof, noise.sigma, prefix="noise"),
            "noise_judges": noise.judges,
            "noise_detail": detail + ("" if noise.judges else
                                      f"; fewer than {MIN_DOF + 1} seeds: information only")}


def heldout_within(predicted: float, measured: float, sd: float | None, judges_: bool
                   ) -> tuple[bool, bool, bool | None]:
    """The held-out runs' rule: (within, within the relative clause, within the noise clause)
    — within when |error| ≤ :data:`REL_TOLERANCE` or |predicted − measured| ≤
    :data:`NOISE_TOLERANCE` × ``sd`` (the seed sd, in the loss's units), the noise clause
    counted only where ``sd`` judges (``judges_``: from 3 seeds or more); None without ``sd``.
    A non-finite prediction is never within."""
    finite = math.isfinite(predicted)
    within_rel = bool(finite and abs((predicted - measured) / measured) <= REL_TOLERANCE)
    within_noise = None if sd is None else bool(
        finite and abs(predicted - measured) <= NOISE_TOLERANCE * sd)
    # a σ from fewer than 3 seeds is information: its clause does not judge
    return within_rel or (bool(within_noise) and judges_), within_rel, within_noise


def _entry(base: dict, law: str, predicted: float, primary: bool,
           interval: tuple[float, float] | None = None) -> dict[str, Any]:
    measured = base["measured"]
    within, within_rel, within_noise = heldout_within(predicted, measured, base["noise"],
                                                      bool(base.get("noise_judges")))
    out = {**base, "law": law, "primary": primary, "predicted": float(predicted),
           "error": float((predicted - measured) / measured), "within_tolerance": within,
           "within_rel": within_rel, "within_noise": within_noise}
    if interval is not None:
        out["interval"] = [float(interval[0]), float(interval[1])]
    return out


def predict_heldout(rep: Report, held: pd.DataFrame, table: pd.DataFrame, eval_set: str,
                    metric: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Predictions of the fitted laws in ``rep`` for the final rows ``held`` of held-out runs,
    judged against the seed noise of :func:`heldout_noise` (``rep.seeds``: the fitted runs'
    seed spread).

    Returns ``(entries, skipped)``: one entry per (experiment, pair, law) as documented in the
    module docstring, and ``{"held-out <runs> <pair>": reason}`` for rows nothing could predict.
    """
    entries: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    law = rep.effective
    cooled = rep.chinchilla.get("joint")
    cooled = JointChinchillaFit.from_json(cooled) if cooled else None
    for exp in heldout_experiments(held, last_evaluations_sd(table, eval_set, metric)):
        pair, n, w = exp["pair"], exp["n"], exp["weight"]
        key = f"held-out {', '.join(exp['runs'])} {pair}"
        tokens = exp.pop("tokens")
        base = {**exp, **heldout_noise(exp, rep.seeds or {})}
        if not math.isfinite(w):
            skipped[key] = "the run has no mixture weight for this pair"
            continue
        if w <= 0:
            skipped[key] = ("zero-shot (p = 0): f̂(0) = 0, so eq. 11 predicts no finite loss "
                            "(zero-shot pairs are outside the laws)")
            continue
        lead = _cooled_entry(cooled, base, tokens)
        if lead is not None:
            entries.append(lead)
        if law is None or pair not in (law.pairs or []):
            skipped[key] = ("the eq. 11 law was not fitted for this pair: "
                            + rep.skipped.get("eq. 11 frontier", "see Skipped"))
        else:
            pred = float(law.predict(n, w, pair))
            band = None
            if law.samples:
                try:
                    lo, hi = law.band(n, w, pair)
                    band = (float(np.asarray(lo).ravel()[0]), float(np.asarray(hi).ravel()[0]))
                except FitError:
                    band = None
            form = law.form.replace("eq", "eq. ")
            identified = pair not in law.not_identified()
            entry = _entry(base, f"eq. 11 (f̂ {form})" + ("" if identified else ", f̂ not identified"),
                           pred, lead is None, band)
            entries.append({**entry, "f_hat_identified": identified})
        j = rep.joint
        if j is not None and pair in (j.pairs or []):
            fitted = [x for x in (j.weights or {}).get(pair, []) if abs(x - w) < _SAME_WEIGHT]
            if fitted:
                pred = float(np.asarray(j.predict(n, fitted[0], pair)).ravel()[0])
                entries.append(_entry(base, "eq. 7 (joint)", pred, False))
        for fw, f in (rep.power_fits.get(pair) or {}).items():
            if abs(fw - w) < _SAME_WEIGHT:
                pred = float(np.asarray(f.predict(n)).ravel()[0])
                entries.append(_entry(base, f"eq. 6 (p = {fw:g})", pred, False))
    return entries, skipped


def _cooled_entry(cooled: JointChinchillaFit | None, base: dict, tokens: float
                  ) -> dict[str, Any] | None:
    """The held-out entry of L(N, D) across weights at the run's N, D and weight (primary), or
    None where that law was not fitted for the pair or the run's weight lies outside it."""
    pair, n, w = base["pair"], base["n"], base["weight"]
    if cooled is None or pair not in (cooled.pairs or []) or not math.isfinite(float(tokens)):
        return None
    try:
        pred = float(cooled.predict(n, float(tokens), w, pair).ravel()[0])
        band = None
        if cooled.samples:
            lo, hi = cooled.band(n, float(tokens), w, pair)
            band = (float(np.ravel(lo)[0]), float(np.ravel(hi)[0]))
    except FitError:
        return None
    return _entry({**base, "tokens": float(tokens)}, f"{COOLED_LAW} (at the run's N, D)", pred,
                  True, band)


def _grouped_reasons(skipped: dict[str, str]) -> str:
    """One entry per distinct reason, with the entries it covers (a K-pair study skips the
    same way for every run and pair)."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in skipped.items():
        by_reason.setdefault(reason, []).append(key)
    return "; ".join(f"{keys[0]}: {reason}" if len(keys) == 1 else
                     f"{reason} ({len(keys)} entries: {keys[0]} …)"
                     for reason, keys in by_reason.items())


def _judged(e: dict[str, Any]) -> str:
    """The table's "within tolerance" cell: which clause holds (the noise clause of a σ from
    fewer than 3 seeds is information)."""
    if e["within_rel"]:
        return f"yes (≤ {REL_TOLERANCE:.0%})"
    if e["within_noise"] and e.get("noise_judges"):
        return f"yes (≤ {NOISE_TOLERANCE:g}× seed sd)"
    if e["within_noise"]:
        return (f"**no** (≤ {NOISE_TOLERANCE:g}× seed sd only: information, "
                f"{e.get('noise_seeds')} seeds)")
    return "**no**"


def _ci(ci: list[float] | None) -> str:
    return "–" if not ci else f"{format_number(ci[0], digits=2)}–{format_number(ci[1], digits=2)}"


def _warning(e: dict[str, Any]) -> str:
    seeds = f" (mean of {e['seeds']} seeds)" if e["seeds"] > 1 else ""
    noise = (f"|Δ| = {abs(e['predicted'] - e['measured']):.3g} > {NOISE_TOLERANCE:g}× seed sd "
             f"{e['noise']:.3g} ({e['noise_source']}, {e['noise_dof']} dof)"
             if e["noise"] is not None and e.get("noise_judges") else
             f"seed sd {e['noise']:.3g} from {e.get('noise_seeds')} seeds ({e['noise_dof']} "
             "dof): information, the 2 % clause alone judges"
             if e["noise"] is not None else "no seed noise measured: the 2 % clause alone")
    return (f"held-out {e['run']} {e['pair']}: {e['law']} predicts {e['predicted']:.4g}, "
            f"measured {e['measured']:.4g}{seeds}: error {e['error']:+.2%} beyond "
            f"±{REL_TOLERANCE:.0%}; {noise}")


def _cooled_law_intervals(entries: list[dict[str, Any]], cooled: JointChinchillaFit | None,
                          view: StudyView, eval_set: str, metric: str, spread: dict
                          ) -> dict[str, Any] | None:
    """The predictive intervals of the primary L(N, D) entries (``COOLED_LAW``) from the fitted
    runs' cooled-down points and seed noise (:func:`fitting.intervals.heldout.
    heldout_predictive`); None where there are none."""
    lead = [e for e in entries if e.get("primary") and e["law"].startswith(COOLED_LAW)]
    if not lead or cooled is None:
        return None
    points, _, why = chinchilla_points(view.table_fit, eval_set, metric, view.budgets_fit)
    if why:
        return None
    return heldout_predictive(lead, cooled, points, largest_size_seed_noises(spread)[0])


def heldout_section(doc: Document, rep: Report, view: StudyView) -> None:
    """The report section "Held-out runs (predicted, never fitted)" on ``view.held`` (the
    held-out runs' final rows; ``view.table`` for their curves); fills ``rep.heldout``, adds
    skipped rows to ``rep.skipped`` and a warning per entry outside tolerance. ``rep.seeds``
    (the fitted runs' seed spread) gives the study's seed noise."""
    held, table, run_ids = view.held, view.table, view.held_ids
    eval_set, metric = view.eval_set, view.metric
    rep.heldout = []
    if not run_ids:
        return
    doc.h(2, "Held-out runs (predicted, never fitted)")
    doc.p(f"Held-out run(s) {', '.join(f'`{r}`' for r in run_ids)} were trained but left out of every fit "
          "of this report. Their final losses are predicted by the eq. 11 law with the fitted "
          "f̂ (the law for an unseen size and weight) — with cool-down branches, first by "
          f"{COOLED_LAW} at the run's own N and D (the law the report leads with) — and, "
          "where the run's weight is one of the "
          "fitted weights, by the joint law (eq. 7) and that weight's power law (eq. 6). "
          "Runs that differ only in their seed are one row: measured = the mean of their final "
          "losses. error = (predicted − measured) / measured; within tolerance: "
          f"|error| ≤ {REL_TOLERANCE:.0%} or |predicted − measured| ≤ {NOISE_TOLERANCE:g}× the "
          "measured seed sd — of the held-out run's own seeds where it has several, else the "
          "study's seed noise for the pair at its largest repeated size, else none (the "
          f"{REL_TOLERANCE:.0%} clause alone); never a fit's residuals. A seed sd from fewer "
          f"than {MIN_DOF + 1} seeds (its 90 % interval spans a factor of 30 from 2 seeds) is "
          f"information: the {REL_TOLERANCE:.0%} clause alone judges. "
          "Curve sd: sd of the run's last 3 evaluated losses.")
    missing = [r for r in run_ids if r not in set(held["run_id"].astype(str))] if len(held) else \
        list(run_ids)
    for r in missing:
        rep.skipped[f"held-out {r}"] = (f"no final {metric!r} rows on eval set {eval_set!r}")
    entries, skipped = predict_heldout(rep, held, table, eval_set, metric)
    rep.skipped.update(skipped)
    rep.heldout = entries
    cooled = rep.chinchilla.get("joint")
    cover = _cooled_law_intervals(entries, JointChinchillaFit.from_json(cooled) if cooled
                                  else None, view, eval_set, metric, rep.seeds or {})
    seed_sd = largest_size_seed_noises(rep.seeds or {})[0]
    eq11_cover = mark_eq11_heldout(entries, rep.effective, view.sizes, seed_sd)
    if not entries:
        doc.p("No prediction could be made: " + (_grouped_reasons(skipped) or "no held-out rows")
              + ".")
        if table["pair"].nunique() >= 3:
            doc.p("With 3 pairs or more, the section *Mixture laws for K pairs* predicts the "
                  "held-out runs from all their weights.")
        return
    rows = []
    for e in entries:
        iv = e.get("interval")
        rows.append([", ".join(e["runs"]), e["pair"], e["size"] or "–", f"{e['n']:.4g}",
                     f"{e['weight']:g}", e["law"], format_number(e["predicted"]) + (
                         f" [{iv[0]:.4g}, {iv[1]:.4g}]" if iv else ""),
                     format_number(e["measured"]), f"{e['error']:+.2%}",
                     "–" if e["noise"] is None else
                     f"{format_number(e['noise'], digits=2)} ({e['noise_seeds']} seeds, "
                     f"{e['noise_dof']} dof; 90 % CI {_ci(e.get('noise_ci90'))})",
                     e["noise_source"], format_number(e["curve_sd"], digits=2), _judged(e)])
        if not e["within_tolerance"]:
            rep.warnings.append(_warning(e))
    doc.table(["run (seeds)", "pair", "size", "N", "p", "law", "predicted [95% band]",
               "measured (seed mean)", "error", "seed sd", "noise source", "curve sd",
               "within tolerance"], rows)
    if cover is not None or eq11_cover is not None:
        _predictive_paragraph(doc, entries, cover, eq11_cover)
    if skipped:
        doc.ul([f"{k}: {v}" for k, v in skipped.items()])


def _predictive_paragraph(doc: Document, entries: list[dict[str, Any]], cover: dict | None,
                          eq11_cover: dict | None = None) -> None:
    """The predictive intervals of the leading law's entries (:mod:`fitting.intervals.heldout`)
    and of eq. 11's (:mod:`fitting.intervals.eq11`, the frontier's law), and how many
    held the measured loss."""
    doc.p("Predictive intervals (fitting.intervals.heldout for L(N, D), fitting.intervals."
          "eq11 for eq. 11, the frontier's law): s² = s_resample² (refits: on runs "
          "resampled within each size for L(N, D), the law's own refits for eq. 11) + s_forms² "
          "(L(N, D): its other form fitted on the same points) + "
          "s_extrapolation² (the leave-largest-size-out backtest's error, grown linearly with "
          "log N beyond the largest fitted size) + σ_seed² (the study's seed sd at its largest "
          "repeated size, /√seeds) — built from the fitted runs only, before any held-out loss "
          "is read.")
    items = []
    for e in entries:
        iv = e.get("predictive")
        if not iv:
            continue
        items.append(
            f"{', '.join(e['runs'])} {e['pair']}, {e['law']}: predicted {iv['estimate']:.4g}, 80 % "
            f"[{iv['lo80']:.4g}, {iv['hi80']:.4g}], 95 % [{iv['lo95']:.4g}, {iv['hi95']:.4g}] "
            f"(s = {iv['sd_total']:.2%}: resample {iv['sd_resample']:.2%}, forms "
            f"{iv['sd_forms']:.2%}, extrapolation "
            f"{iv['sd_extrapolation']:.2%}, seed {iv['sigma_seed']:.2%}); measured "
            f"{e['measured']:.4g}: {'inside' if e['inside95'] else 'outside'} the 95 %, "
            f"{'inside' if e['inside80'] else 'outside'} the 80 %; the 95 % band spans "
            f"×{band_factor(iv):.2f}" + ("" if informative(iv) else " — **uninformative**")
            + ("" if e.get("calibrated") else " — not calibrated, not counted")
            + (f" — {e['predictive_note']}" if e.get("predictive_note") else ""))
    doc.ul(items)
    said = []
    for name, cov in (("the leading law", cover), ("eq. 11", eq11_cover)):
        if cov is not None:
            said.append(f"{name}: " + "; ".join(f"{q:.0%} {coverage_text(cov, q)}"
                                                  for q in LEVELS))
    widths = [e["predictive"] for e in entries if e.get("predictive")]
    wide = sum(not informative(iv) for iv in widths)
    median_s = float(np.median([iv["sd_total"] for iv in widths])) if widths else math.nan
    doc.p("Inside (calibrated intervals only): " + "; ".join(said) + ". Width: median s = "
          f"{median_s:.2%}; {wide} of {len(widths)} 95 % bands span more than "
          f"×{UNINFORMATIVE_FACTOR:g} (uninformative: inside says little about a prediction "
          "there). Too few to measure coverage in one study; benchmarks/studies/"
          "main_job_seeds.py pools them over vocabulary seeds.")
