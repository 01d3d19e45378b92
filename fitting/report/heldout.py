"""Held-out runs: trained, never fitted, predicted by the fitted laws (the report's check of
prediction on what the fits never saw).

A study names some runs "held out" (typically a larger size at an unseen weight).
:func:`fitting.report.writer.write_report` removes their rows from every fit and calls
:func:`heldout_section`, which compares each held-out (run, pair) final loss with:

* where the table has cool-down branches, the law the report leads with: L(N, D) across
  weights on cooled-down budgets (:mod:`fitting.laws.budget.chinchilla_joint`) at the run's own N and
  D (its final ``tokens``) and weight; entry ``primary: true``;
* the eq. 11 law (Fernandes et al. 2023) with the fitted f̂ — eq. 12 where it was identifiable,
  else the linear eq. 13 — the law that predicts an unseen (N, p) at the trained budget; entry
  ``primary: true`` when there is no L(N, D) entry, with ``f_hat_identified`` (false: the law
  names it, and the prediction rests on an f̂ that the data do not determine,
  :class:`fitting.laws.size.effective.MultilingualLawFit`);
* where the run's weight equals a fitted weight, also the joint law (eq. 7, its β_p) and the
  per-weight power law (eq. 6) at the run's N.

A pair the run did not train (p = 0) is not predicted: f̂(0) = 0, so eq. 11 gives no finite loss
(Fernandes et al. leave zero-shot pairs out of the laws); it is listed under "skipped".

Each entry: ``error = (predicted − measured) / measured``; ``noise`` is the residual standard
deviation of the predicting law's fit for that pair (√(SSR / (points − parameters)), the scatter
of the fitted runs about the law: seed-to-seed and evaluation noise plus misfit), or 1% of the
measured loss (Fernandes footnote 5) where that is undefined (``noise_source`` says which);
``within_tolerance = |error| ≤ 2% or |predicted − measured| ≤ 3·noise``; ``within_rel`` says
whether the first clause alone holds. ``curve_sd`` (the sd of
the run's last 3 evaluated losses) is given for information: a large one means the measured
value itself is still moving.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.tables import last_evaluations_sd
from fitting.laws.budget.chinchilla_joint import JointChinchillaFit
from fitting.report.chinchilla import COOLED_LAW
from fitting.report.markdown import Document, format_number
from fitting.report.sections import Report

__all__ = ["REL_TOLERANCE", "NOISE_TOLERANCE", "check_heldout_runs", "predict_heldout",
           "heldout_section"]

#: |error| within this fraction of the measured loss is within tolerance
REL_TOLERANCE = 0.02
#: … or |predicted − measured| within this many noise levels
NOISE_TOLERANCE = 3.0
_SAME_WEIGHT = 1e-6


def check_heldout_runs(table: pd.DataFrame, run_ids: Sequence[str]) -> list[str]:
    """The held-out run ids as strings, each checked to be a ``run_id`` of ``table``.

    Raises FitError naming an unknown id, the closest known one (difflib) and the known ids.
    """
    ids = [str(r) for r in run_ids]
    if not ids:
        return []
    if "run_id" not in table.columns:
        raise FitError(f"held-out runs {ids} given, but the table has no run_id column",
                       column="run_id")
    known = sorted(table["run_id"].astype(str).unique())
    for rid in ids:
        if rid in known:
            continue
        close = difflib.get_close_matches(rid, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        shown = ", ".join(known[:60]) + (f", … ({len(known)} in all)" if len(known) > 60 else "")
        raise FitError(f"held-out run {rid!r} is not a run_id of the table{hint} "
                       f"Known run ids: {shown}", column="run_id")
    return list(dict.fromkeys(ids))


def _noise(sigma: float | None, measured: float, source: str) -> tuple[float, str]:
    if sigma is not None and math.isfinite(sigma) and sigma > 0:
        return float(sigma), f"residual sd of the {source} fit"
    return 0.01 * measured, "1% of the measured loss (footnote 5): the fit's residual sd is undefined"


def _entry(base: dict, law: str, predicted: float, noise: tuple[float, str],
           primary: bool, interval: tuple[float, float] | None = None) -> dict[str, Any]:
    measured = base["measured"]
    err = (predicted - measured) / measured
    sd, src = noise
    ok = bool(math.isfinite(predicted) and (abs(err) <= REL_TOLERANCE
                                            or abs(predicted - measured) <= NOISE_TOLERANCE * sd))
    out = {**base, "law": law, "primary": primary, "predicted": float(predicted),
           "error": float(err), "noise": float(sd), "noise_source": src,
           "within_tolerance": ok,
           "within_rel": bool(math.isfinite(predicted) and abs(err) <= REL_TOLERANCE)}
    if interval is not None:
        out["interval"] = [float(interval[0]), float(interval[1])]
    return out


def predict_heldout(rep: Report, held: pd.DataFrame, table: pd.DataFrame, eval_set: str,
                    metric: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Predictions of the fitted laws in ``rep`` for the final rows ``held`` of held-out runs.

    Returns ``(entries, skipped)``: one entry per (run, pair, law) as documented in the module
    docstring, and ``{"held-out <run> <pair>": reason}`` for rows nothing could predict.
    """
    entries: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    law = rep.effective
    cooled = rep.chinchilla.get("joint")
    cooled = JointChinchillaFit.from_json(cooled) if cooled else None
    curve_sd = last_evaluations_sd(table, eval_set, metric)
    for r in held.sort_values(["run_id", "pair"]).itertuples(index=False):
        run, pair = str(r.run_id), str(r.pair)
        n, w, measured = float(r.n), float(getattr(r, "weight", float("nan"))), float(r.value)
        key = f"held-out {run} {pair}"
        base = {"run": run, "pair": pair, "size": str(getattr(r, "size", "")), "n": n,
                "weight": w, "measured": measured,
                "curve_sd": curve_sd.get((run, pair))}
        if not math.isfinite(w):
            skipped[key] = "the run has no mixture weight for this pair"
            continue
        if w <= 0:
            skipped[key] = ("zero-shot (p = 0): f̂(0) = 0, so eq. 11 predicts no finite loss "
                            "(zero-shot pairs are outside the laws)")
            continue
        lead = _cooled_entry(cooled, base, getattr(r, "tokens", float("nan")))
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
                           pred, _noise(law.goodness.get(f"sigma[{pair}]"), measured,
                                        f"eq. 11 (f̂ {form}) for {pair}"), lead is None, band)
            entries.append({**entry, "f_hat_identified": identified})
        j = rep.joint
        if j is not None and pair in (j.pairs or []):
            fitted = [x for x in (j.weights or {}).get(pair, []) if abs(x - w) < _SAME_WEIGHT]
            if fitted:
                pred = float(np.asarray(j.predict(n, fitted[0], pair)).ravel()[0])
                entries.append(_entry(base, "eq. 7 (joint)", pred,
                                      _noise(j.goodness.get(f"sigma[{pair}]"), measured,
                                             f"joint eq. 7 for {pair}"), False))
        for fw, f in (rep.power_fits.get(pair) or {}).items():
            if abs(fw - w) < _SAME_WEIGHT:
                pred = float(np.asarray(f.predict(n)).ravel()[0])
                entries.append(_entry(base, f"eq. 6 (p = {fw:g})", pred,
                                      _noise(f.goodness.get("sigma"), measured,
                                             f"eq. 6 for {pair} at p = {fw:g}"), False))
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
    noise = _noise(cooled.goodness.get(f"sigma[{pair}]"), base["measured"], f"{COOLED_LAW} for "
                   f"{pair}")
    return _entry({**base, "tokens": float(tokens)}, f"{COOLED_LAW} (at the run's N, D)", pred,
                  noise, True, band)


def _grouped_reasons(skipped: dict[str, str]) -> str:
    """One entry per distinct reason, with the entries it covers (a K-pair study skips the
    same way for every run and pair)."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in skipped.items():
        by_reason.setdefault(reason, []).append(key)
    return "; ".join(f"{keys[0]}: {reason}" if len(keys) == 1 else
                     f"{reason} ({len(keys)} entries: {keys[0]} …)"
                     for reason, keys in by_reason.items())


def heldout_section(doc: Document, rep: Report, held: pd.DataFrame, table: pd.DataFrame,
                    run_ids: Sequence[str], eval_set: str, metric: str) -> None:
    """The report section "Held-out runs (predicted, never fitted)"; fills ``rep.heldout``, adds
    skipped rows to ``rep.skipped`` and a warning per entry outside tolerance."""
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
          "error = (predicted − measured) / measured; noise = residual sd of the predicting "
          "law's fit for that pair (1% of the loss where undefined); within tolerance: "
          f"|error| ≤ {REL_TOLERANCE:.0%} or |predicted − measured| ≤ {NOISE_TOLERANCE:g}× noise. "
          "Curve sd: sd of the run's last 3 evaluated losses.")
    missing = [r for r in run_ids if r not in set(held["run_id"].astype(str))] if len(held) else \
        list(run_ids)
    for r in missing:
        rep.skipped[f"held-out {r}"] = (f"no final {metric!r} rows on eval set {eval_set!r}")
    entries, skipped = predict_heldout(rep, held, table, eval_set, metric)
    rep.skipped.update(skipped)
    rep.heldout = entries
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
        rows.append([e["run"], e["pair"], e["size"] or "–", f"{e['n']:.4g}", f"{e['weight']:g}",
                     e["law"], format_number(e["predicted"]) + (
                         f" [{iv[0]:.4g}, {iv[1]:.4g}]" if iv else ""),
                     format_number(e["measured"]), f"{e['error']:+.2%}",
                     format_number(e["noise"], digits=2),
                     format_number(e["curve_sd"], digits=2),
                     "yes" if e["within_tolerance"] else "**no**"])
        if not e["within_tolerance"]:
            rep.warnings.append(
                f"held-out {e['run']} {e['pair']}: {e['law']} predicts {e['predicted']:.4g}, "
                f"measured {e['measured']:.4g} (error {e['error']:+.2%}, |Δ| = "
                f"{abs(e['predicted'] - e['measured']):.3g} > {NOISE_TOLERANCE:g}× noise "
                f"{e['noise']:.3g} and > {REL_TOLERANCE:.0%})")
    doc.table(["run", "pair", "size", "N", "p", "law", "predicted [95% band]", "measured",
               "error", "noise", "curve sd", "within tolerance"], rows)
    if skipped:
        doc.ul([f"{k}: {v}" for k, v in skipped.items()])
