"""The report's section "Verification": the recommended K-pair mixture trained beside baselines.

A study's verification stage (:mod:`mnmt.study.verify`) trains the recommended weights and the
baseline mixtures at one size with the same seeds; :func:`split_verification` keeps those runs
out of every fit. :func:`verification_section` sets what they measured against the recommending
law's prediction of J(w) = Σ π_i L_i — its bootstrap band and its predictive interval
(:func:`fitting.intervals.mixture.objective_interval`, calibrated on the held-out mixtures;
coverage over calibrated intervals only, :func:`predictive_checks`) — and judges each baseline
paired by seed (:func:`compare_paired`: one-sided paired t, Holm-corrected over the baselines
(:func:`holm`), and a gap beyond :data:`SD_MULTIPLE` paired sd). Diverged seeds are counted,
never dropped; :func:`verification_seed_noise` pools trained pairs apart from zero-shot ones.
The rules in full: docs/guides/many_pairs.md, "5. Verification".
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from fitting.core.base import FitError
from fitting.core.uncertainty import beyond_sd, percentile_range
from fitting.data.schema import RECOMMENDED
from fitting.data.tables import final_losses
from fitting.intervals.mixture import (
    cv_form_weights,
    heldout_objective_error,
    objective_interval,
    objective_noise_floor,
    objective_samples,
)
from fitting.intervals.predictive import LEVELS, PredictiveInterval, coverage, coverage_text
from fitting.laws.mixture.transfer import pooled_seed_noise
from fitting.report.markdown import Document, format_number
from fitting.report.view import split_verification

__all__ = ["RECOMMENDED", "SD_MULTIPLE", "ALPHA", "split_verification", "compare_paired",
           "holm", "run_seed", "predict_mixtures", "verification_payload",
           "verification_section", "verification_seed_noise", "predictive_checks",
           "verification_noise_floor"]

#: the recommendation beats a baseline by more than this many paired sd (sd of d_s)
SD_MULTIPLE = 2.0
#: ... and with a Holm-corrected one-sided p below this
ALPHA = 0.05
_PLAN_KEYS = ("size", "seeds", "mixtures", "runs")
_SEED = re.compile(r"_s(\d+)$")


def check_plan(plan: Mapping) -> None:
    """FitError unless ``plan`` has the keys of a verification plan and names the recommended
    mixture: size, seeds, mixtures {name: {pair: weight}}, runs {run_id: mixture name}."""
    missing = [k for k in _PLAN_KEYS if k not in plan]
    if missing:
        raise FitError(f"verification: missing key(s) {missing}; expected {list(_PLAN_KEYS)}")
    if RECOMMENDED not in plan["mixtures"]:
        raise FitError(f"verification: mixtures {sorted(plan['mixtures'])} do not include "
                       f"{RECOMMENDED!r}")
    unknown = sorted({name for name in plan["runs"].values()} - set(plan["mixtures"]))
    if unknown:
        raise FitError(f"verification: runs name unknown mixture(s) {unknown}")


def run_seed(run_id: str) -> int:
    """The seed of a verification run from its id, ``<size>_verify-<mixture>_s<seed>``
    (:func:`mnmt.study.verify.verification_runs`); FitError naming the id otherwise."""
    m = _SEED.search(str(run_id))
    if m is None:
        raise FitError(f"verification: run id {run_id!r} does not end in _s<seed>; the paired "
                       "comparison needs each run's seed")
    return int(m.group(1))


def holm(p: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (Holm 1979): with the m p-values sorted,
    p_(1) ≤ … ≤ p_(m), p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)). Rejecting where p̃ < α
    keeps the family-wise error rate ≤ α. A NaN p (no test) counts as 1: it still counts in m,
    so leaving a test out never makes the others easier to pass."""
    names = list(p)
    vals = np.array([float(p[k]) if np.isfinite(p[k]) else 1.0 for k in names])
    order = np.argsort(vals, kind="stable")
    m, running, out = len(vals), 0.0, {}
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * vals[i]))
        out[names[i]] = float(running)
    return out


def compare_paired(rec: Mapping[int, float], base: Mapping[int, float], *,
                   multiple: float = SD_MULTIPLE) -> dict:
    """The recommendation (per-seed objectives ``rec`` {seed: J}) against a baseline (``base``),
    paired by seed: d_s = J_base,s − J_rec,s over the seeds both measured.

    Returns gap (mean d, positive: the recommendation is better), paired_sd (sd of d, ddof 1),
    n_seeds (seeds paired), n_diverged and diverged {"recommended": [seeds], "baseline":
    [seeds]} (a non-finite J), p (one-sided paired t, d̄ / (s_d/√n) on n − 1 dof; 0 or 1 when
    s_d = 0), large (gap > ``multiple`` · paired_sd) and why (a reason there is no verdict,
    else absent). A seed where the recommendation diverged makes the verdict a loss; one where
    only the baseline diverged leaves the pairing. The Holm correction and the verdict are
    :func:`verification_payload`'s (they need every baseline's p)."""
    seeds = sorted(set(rec) & set(base))
    bad_r = [s for s in seeds if not np.isfinite(rec[s])]
    bad_b = [s for s in seeds if np.isfinite(rec[s]) and not np.isfinite(base[s])]
    d = np.array([base[s] - rec[s] for s in seeds if s not in bad_r and s not in bad_b], float)
    out = {"gap": float(d.mean()) if len(d) else float("nan"), "paired_sd": float("nan"),
           "n_seeds": int(len(d)), "n_diverged": len(bad_r) + len(bad_b),
           "diverged": {"recommended": bad_r, "baseline": bad_b}, "p": float("nan"),
           "large": False}
    if len(d) >= 2:
        sd = float(d.std(ddof=1))
        out["paired_sd"] = sd
        out["large"] = beyond_sd(out["gap"], sd, multiple)
        if sd > 0:
            out["p"] = float(stats.t.sf(out["gap"] / (sd / math.sqrt(len(d))), len(d) - 1))
        else:
            out["p"] = 0.0 if out["gap"] > 0 else 1.0
    if bad_r:
        out["why"] = f"the recommendation diverged at seed(s) {bad_r}"
    elif len(d) < 2:
        out["why"] = "fewer than 2 paired seeds measured"
    return out


def _objective(losses: Mapping[str, float], pi: Mapping[str, float]) -> float:
    """J = Σ π_i L_i over the pairs with π_i > 0 (NaN when one of them has no loss)."""
    return float(sum(w * losses.get(p, float("nan")) for p, w in pi.items() if w > 0))


def predict_mixtures(law, n: float, mixtures: Mapping[str, Mapping[str, float]],
                     pi: Mapping[str, float], level: float = 0.95) -> dict[str, dict]:
    """The law's predictions at size ``n`` for each mixture: {name: {objective, band, losses,
    bands}} (bands None without bootstrap refits). NaN where the law cannot predict: at a size
    it cannot reach, and for a pair at weight 0 (untrained: a zero-shot loss, outside every
    mixture law's domain); J counts the pairs with π_i > 0 only
    (:func:`~fitting.intervals.mixture.objective_samples`)."""
    pairs = list(law.pairs or [])
    names = list(mixtures)
    W = np.array([[float(mixtures[m].get(p, 0.0)) for p in pairs] for m in names])
    N = np.full(len(names), float(n))
    pred = np.where(W > 0, law.predict(N, W), np.nan)
    piv = np.array([float(pi.get(p, 0.0)) for p in pairs])
    obj, obj_samples = objective_samples(law, n, W, piv)
    lo = hi = olo = ohi = None
    if obj_samples is not None:
        samples = np.where(W > 0, law.predict_samples(N, W), np.nan)  # (refits, mixtures, pairs)
        with warnings.catch_warnings():  # an untrained pair: an all-NaN column, NaN band
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = percentile_range(samples, level, estimate=pred)
            olo, ohi = percentile_range(obj_samples, level, estimate=obj)
    out = {}
    for m, name in enumerate(names):
        out[name] = {
            "objective": float(obj[m]),
            "band": None if olo is None else [float(olo[m]), float(ohi[m])],
            "losses": {p: float(pred[m, i]) for i, p in enumerate(pairs)},
            "bands": None if lo is None else {p: [float(lo[m, i]), float(hi[m, i])]
                                              for i, p in enumerate(pairs)}}
    return out


def _sd(values: Sequence[float]) -> float:
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    return float(v.std(ddof=1)) if len(v) >= 2 else float("nan")


def _mean(values: Sequence[float]) -> float:
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    return float(v.mean()) if len(v) else float("nan")


def _diverged(losses: Mapping[str, float], weights: Mapping[str, float], j: float) -> bool:
    """A run diverged when J or the loss of a pair its mixture trains is missing or not finite."""
    return not np.isfinite(j) or any(
        float(w) > 0 and not np.isfinite(losses.get(p, float("nan"))) for p, w in weights.items())


def _verdict(c: dict, p_holm: float, rec_bad: bool) -> dict:
    """``c`` (:func:`compare_paired`) with its Holm-corrected p, the verdict and why not."""
    c = {**c, "p_holm": p_holm}
    if rec_bad and "why" not in c:
        c["why"] = "the recommendation's measured losses exceed a maximum loss"
    elif "why" not in c and not c["gap"] > 0:
        c["why"] = "the baseline's mean J is as low or lower"
    elif "why" not in c and not p_holm < ALPHA:
        c["why"] = f"Holm-corrected p {p_holm:.2g} >= {ALPHA:g}"
    elif "why" not in c and not c["large"]:
        c["why"] = f"gap within {SD_MULTIPLE:g} paired sd"
    c["beats"] = "why" not in c
    return c


def verification_payload(plan: Mapping, recommendation: Mapping,
                         measured: Mapping[str, Mapping[str, Mapping[str, float]]],
                         predicted: Mapping[str, dict] | None = None, *,
                         n: float | None = None) -> dict:
    """``fits.json["mixture"]["verification"]``.

    ``measured``: {mixture name: {run_id: {pair: final loss}}} of the verification runs (NaN,
    or a missing pair, for a run that diverged); run ids end in ``_s<seed>``
    (:func:`run_seed`); ``predicted``: :func:`predict_mixtures`' result (None: not predicted).
    Keys: size, n, seeds, objective (what J is, its preferences and maximum losses), mixtures
    {name: {weights, predicted, measured, sd, runs, diverged, violations}}, beats {baseline:
    bool}, comparisons {baseline: :func:`compare_paired` + p_holm, beats, why}, sd_rule, notes."""
    check_plan(plan)
    pi = dict(recommendation["constraints"]["preferences"])
    max_loss = dict(recommendation["constraints"].get("max_loss") or {})
    mixtures, by_seed, notes = {}, {}, []
    for name, weights in plan["mixtures"].items():
        runs = measured.get(name, {})
        per_run = {rid: _objective(losses, pi) for rid, losses in runs.items()}
        diverged = [rid for rid, losses in runs.items()
                    if _diverged(losses, weights, per_run[rid])]
        by_seed[name] = {run_seed(rid): (float("nan") if rid in diverged else j)
                         for rid, j in per_run.items()}
        ok = [j for rid, j in per_run.items() if rid not in diverged]
        ok_runs = [losses for rid, losses in runs.items() if rid not in diverged]
        pairs = list(pi)
        mean = {p: _mean([r.get(p, float("nan")) for r in ok_runs]) for p in pairs}
        over = [f"loss {p} {mean[p]:.4g} > max {max_loss[p]:.4g}" for p in max_loss
                if p in mean and mean[p] > max_loss[p]]
        mixtures[name] = {
            "weights": dict(weights),
            "predicted": (predicted or {}).get(name),
            "measured": {"objective": _mean(ok), "losses": mean, "per_seed": per_run},
            "sd": {"objective": _sd(ok),
                   "losses": {p: _sd([r.get(p, float("nan")) for r in ok_runs]) for p in pairs}},
            "runs": list(runs), "diverged": diverged, "violations": over}
        expected = sum(1 for v in plan["runs"].values() if v == name)
        if len(runs) < expected:
            notes.append(f"{name}: {len(runs)} of {expected} runs measured")
        if diverged:
            notes.append(f"{name}: {len(diverged)} of {len(runs)} runs diverged (no finite final "
                         f"loss of a trained pair): {', '.join(diverged)}")
    rec_weights = recommendation.get("weights") or {}
    planned = plan["mixtures"][RECOMMENDED]
    if any(abs(float(planned.get(p, 0.0)) - float(w)) > 1e-6 for p, w in rec_weights.items()):
        notes.append("the recommendation in this report differs from the weights trained as "
                     "'recommended' (the report changed since they were trained)")
    rec_bad = bool(mixtures[RECOMMENDED]["violations"])
    raw = {name: compare_paired(by_seed[RECOMMENDED], by_seed[name])
           for name in plan["mixtures"] if name != RECOMMENDED}
    adjusted = holm({name: c["p"] for name, c in raw.items()})
    comparisons = {name: _verdict(c, adjusted[name], rec_bad) for name, c in raw.items()}
    return {
        "size": plan["size"], "n": n, "seeds": list(plan["seeds"]),
        "objective": {"description": "preference-weighted mean loss sum_i pi_i L_i (the "
                                     "recommendation's objective)",
                      "preferences": pi, "max_loss": max_loss,
                      "recommended_for_n": recommendation.get("target_size"),
                      "law": recommendation.get("law")},
        "mixtures": mixtures, "beats": {name: c["beats"] for name, c in comparisons.items()},
        "comparisons": comparisons,
        "sd_rule": f"paired by seed, d_s = J_base,s - J_rec,s: beats when the Holm-corrected "
                   f"one-sided paired-t p < {ALPHA:g} (over {len(comparisons)} baselines) and "
                   f"mean d > {SD_MULTIPLE:g} sd(d) (ddof 1); a diverged recommendation seed "
                   "is a loss",
        "notes": notes,
    }


def _measured_losses(table: pd.DataFrame, plan: Mapping, eval_set: str, metric: str,
                     final: pd.DataFrame | None = None) -> tuple[dict, float | None]:
    """{mixture: {run_id: {pair: final loss}}} of the verification rows, and their size N. A
    run in the table without a finite final loss of a pair it evaluates (it diverged, or
    stopped early) keeps that pair as NaN: :func:`verification_payload` counts it. ``final``:
    the rows' final losses where already derived
    (:attr:`fitting.report.view.StudyView.verify_final`), else derived here."""
    out: dict[str, dict] = {name: {} for name in plan["mixtures"]}
    if not len(table):
        return out, None
    fin = final if final is not None else final_losses(
        table, eval_set=eval_set, metric=metric, source="verification", drop_invalid=True)[0]
    for rid, rows in fin.groupby(fin["run_id"].astype(str), sort=True):
        name = plan["runs"].get(rid)
        if name is not None:
            out[name][rid] = {str(p): float(v) for p, v in zip(rows["pair"], rows["value"],
                                                                strict=True)}
    for rid in sorted(set(table["run_id"].astype(str)) & set(plan["runs"])):
        name = plan["runs"][rid]
        have = out[name].setdefault(rid, {})
        for p in plan["mixtures"][name]:
            have.setdefault(str(p), float("nan"))
    n = pd.to_numeric(fin["n"], errors="coerce").dropna()
    return out, (float(n.iloc[0]) if len(n) else None)


def verification_seed_noise(table: pd.DataFrame, plan: Mapping | None, *,
                            eval_set: str = "validation", metric: str = "loss",
                            trained: bool = True, final: pd.DataFrame | None = None) -> dict:
    """The study's seed noise measured by its verification runs (the same seeds for every
    mixture at one size): :func:`~fitting.laws.mixture.transfer.pooled_seed_noise` of their
    final losses, {(pair, N): {relative_sd, mixtures, dof}}, pooled per pair over the mixtures
    that train it (weight > 0). ``trained=False``: over the mixtures that hold it at weight 0
    instead (zero-shot losses, which vary with the seed far more: never the noise of a trained
    loss). Diverged runs (:func:`verification_payload`) are left out. {} without a plan or runs.
    ``final``: as in :func:`_measured_losses`."""
    if not plan or not len(table):
        return {}
    measured, n = _measured_losses(table, plan, eval_set, metric, final)
    if n is None:
        return {}

    def kept(name: str, pair: str) -> bool:
        w = float(plan["mixtures"][name].get(pair, 0.0))
        return w > 0 if trained else w <= 0

    return pooled_seed_noise((pair, n, name, y) for name, runs in measured.items()
                             for losses in runs.values()
                             if not _diverged(losses, plan["mixtures"][name], 0.0)
                             for pair, y in losses.items() if kept(name, pair))


def _noise_list(noise: Mapping[tuple[str, float], dict]) -> list[dict]:
    return [{"pair": p, "n": n, **v} for (p, n), v in sorted(noise.items())]


def verification_section(doc: Document, rep, table: pd.DataFrame, mixture: dict | None,
                         plan: Mapping | None, laws: Mapping, *, eval_set: str = "validation",
                         metric: str = "loss", final: pd.DataFrame | None = None) -> dict | None:
    """Add the section to ``doc`` and return ``fits.json["mixture"]["verification"]``; None
    without a plan, FitError for a plan that is not one (:func:`check_plan`, raised by
    :func:`verification_payload`; the writer's section boundary reports it). ``table``: the verification runs' rows (:func:`split_verification`);
    ``mixture``: ``fits.json["mixture"]``; ``laws``: the fitted mixture laws by form;
    ``final``: the rows' final losses where already derived (:func:`_measured_losses`)."""
    if not plan:
        return None
    doc.h(2, "Verification: the recommendation trained")
    rec = (mixture or {}).get("recommendation")
    if not rec:
        why = "the report has no K-pair recommendation to verify"
        doc.p(f"Skipped: {why}.")
        rep.skipped["verification"] = why
        return {"skipped": why}
    measured, n = _measured_losses(table, plan, eval_set, metric, final)
    law = laws.get(rec.get("law"))
    predicted = None
    if law is not None and n is not None:
        predicted = predict_mixtures(law, n, plan["mixtures"], rec["constraints"]["preferences"])
    intervals, calibration = {}, None
    if predicted is not None:
        pi = rec["constraints"]["preferences"]
        calibration = heldout_objective_error(law, (mixture or {}).get("heldout"), pi, max_n=n)
        cv = ((mixture or {}).get("laws") or {})
        fw = cv_form_weights({f: (cv.get(f) or {}).get("cv_mae") for f in laws}, rec.get("law"))
        for name, weights in plan["mixtures"].items():
            iv = objective_interval(law, laws, n, weights, pi, calibration, fw)
            if iv is not None:
                intervals[name] = iv
                predicted[name]["interval"] = iv.to_dict()
    payload = verification_payload(plan, rec, measured, predicted, n=n)
    if calibration is not None:
        payload["predictive"] = predictive_checks(payload, intervals, calibration)
    target = rec.get("target_size")
    if n is not None and target is not None and not math.isclose(n, float(target), rel_tol=1e-6):
        payload["notes"].append(f"trained at N = {n:.6g}, but the recommendation is for N = "
                                f"{float(target):.6g}: the verdict is about another size")
    payload["seed_noise"] = {
        key: _noise_list(verification_seed_noise(table, plan, eval_set=eval_set, metric=metric,
                                                 trained=trained, final=final))
        for key, trained in (("trained", True), ("zero_shot", False))}
    _markdown(doc, payload, rec)
    rep.warnings += [f"verification: {note}" for note in payload["notes"]]
    return payload


def predictive_checks(payload: Mapping, intervals: Mapping[str, PredictiveInterval],
                      calibration: Mapping) -> dict:
    """Whether each mixture's measured mean J lies inside its predictive interval
    (:func:`~fitting.intervals.mixture.objective_interval`): {calibration, inside
    {mixture: {"0.80": bool, "0.95": bool}}, coverage (:func:`fitting.intervals.predictive.coverage`
    over the mixtures whose interval is calibrated; the others counted in ``left_out``),
    calibrated (whether the held-out term entered), noise_floor (the half-width a law without
    error would still have, :func:`~fitting.intervals.mixture.objective_noise_floor` of the
    mixtures' seeds, diverged ones left out; None uncalibrated)}; the marks are also set
    on ``payload["mixtures"][name]`` as ``inside80`` / ``inside95``."""
    records, inside = [], {}
    for name, iv in intervals.items():
        m = payload["mixtures"][name]
        j = float(m["measured"]["objective"])
        if not math.isfinite(j):
            continue
        records.append((iv, j))
        inside[name] = {f"{q:.2f}": iv.contains(j, q) for q in LEVELS}
        m["inside80"], m["inside95"] = inside[name]["0.80"], inside[name]["0.95"]
    calibrated = bool(math.isfinite(float(calibration.get("rms_log", float("nan")))))
    return {"calibration": dict(calibration), "inside": inside,
            "coverage": coverage(records, calibrated_only=True), "calibrated": calibrated,
            "noise_floor": verification_noise_floor(payload["mixtures"], calibration.get("runs"))
            if calibrated else None}


def verification_noise_floor(mixtures: Mapping[str, Mapping], calibration_runs: float | None
                             ) -> dict | None:
    """:func:`~fitting.intervals.mixture.objective_noise_floor` of the verification's mixtures
    (``fits.json["mixture"]["verification"]["mixtures"]``): each mixture's J per seed, its
    diverged runs left out."""
    per_seed = [[j for rid, j in ((m.get("measured") or {}).get("per_seed") or {}).items()
                 if rid not in (m.get("diverged") or ())] for m in mixtures.values()]
    return objective_noise_floor(per_seed, calibration_runs)


def _band(b) -> str:
    return "–" if not b else f"[{b[0]:.4g}, {b[1]:.4g}]"


def _interval(iv: Mapping | None) -> str:
    return "–" if not iv else f"[{iv['lo95']:.4g}, {iv['hi95']:.4g}] (s {100 * iv['sd_total']:.2g} %)"


def _inside(m: Mapping) -> str:
    if "inside80" not in m:
        return "–"
    return " / ".join("yes" if m[k] else "no" for k in ("inside80", "inside95"))


def _predictive_text(pv: Mapping) -> str:
    """How the predictive intervals were built and how often they held."""
    cal = pv["calibration"]
    cov = pv["coverage"]
    held = "; ".join(f"{q:.0%} {coverage_text(cov, q)}" for q in LEVELS)
    calib = (f"the held-out mixtures' RMS log error of J, {100 * cal['rms_log']:.2g} % over "
             f"{cal['runs']} runs at sizes up to this one" if pv["calibrated"] else
             f"no calibration term ({cal['runs']} held-out mixtures at sizes up to this one; "
             "at least 2 needed): the interval is too narrow by what the law misses")
    how = ("in log space, {calib}, with t quantiles on the runs it averaged; the spread of J "
           "over the law's bootstrap refits and over the other mixture-law forms is inside "
           "that error, reported but not added" if pv["calibrated"] else
           "in log space, the spread of J over the law's bootstrap refits and over the other "
           "mixture-law forms, and {calib}").format(calib=calib)
    return ("Predictive interval of J (fitting.intervals.mixture): " + how + ", fixed before "
            "any verification run was read. Measured mean J inside (calibrated intervals "
            "only): "
            f"{held}. The recommendation is the law's own optimum, where the law's error is not "
            "a random draw: read its row with that in mind."
            + _floor_text(pv.get("noise_floor"), float(cal.get("rms_log", float("nan")))))


def _floor_text(floor: Mapping | None, rms_log: float) -> str:
    """What seed noise alone leaves of the interval: its half-width for a law without error,
    and the law's own share of the calibration error, √(rms² − σ²) (the two add in squares)."""
    if not floor:
        return ""
    sigma = floor["sigma_log"]
    law = math.sqrt(max(rms_log ** 2 - sigma ** 2, 0.0))
    return (f" Each held-out error holds one run's seed noise: with these mixtures' seed sd of "
            f"log J at the verification's size ({100 * sigma:.2g} %, {floor['dof']} dof; an "
            "estimate, and the held-out runs' own sizes may differ), a law without error "
            f"would still have a 95 % interval of about ±{100 * floor['half_width']:.2g} % in "
            f"log; the law's own error on mixtures it was not fitted on is about "
            f"{100 * law:.2g} % (√(rms² − σ²)), which more runs of the same design narrow only "
            "as far as they make the law more accurate.")


def _noise_text(entries: list[dict]) -> str:
    return "; ".join(f"{e['pair']} {100 * e['relative_sd']:.2g} % ({e['mixtures']} mixtures, "
                     f"{e['dof']} dof)" for e in entries)


def _markdown(doc: Document, v: dict, rec: Mapping) -> None:
    n_text = "" if v["n"] is None else f" (N = {v['n']:.3g})"
    doc.p(f"The recommended weights and the study's baselines trained at {v['size']}{n_text} "
          f"with seeds {', '.join(map(str, v['seeds']))} (the same seeds for every mixture); "
          f"never fitted. Predicted by the {rec.get('law')} law that made the recommendation "
          f"(for N = {rec.get('target_size', float('nan')):.3g}), with 95 % bootstrap bands. "
          "Objective J = Σ π_i L_i, the preference-weighted mean loss the recommendation "
          "minimised (π: " + ", ".join(f"{p} {w:.3g}" for p, w in
                                        v["objective"]["preferences"].items()) + ").")
    mixes = v["mixtures"]
    pairs = list(next(iter(mixes.values()))["weights"])
    doc.table(["mixture", f"weights ({' '.join(pairs)})", "predicted J", "95% band",
               "95% predictive interval", "measured J", "inside 80 / 95 %", "seed sd", "runs",
               "diverged"],
              [[name, " ".join(f"{w:.3f}" for w in m["weights"].values()),
                format_number((m["predicted"] or {}).get("objective")),
                _band((m["predicted"] or {}).get("band")),
                _interval((m["predicted"] or {}).get("interval")),
                format_number(m["measured"]["objective"]), _inside(m),
                format_number(m["sd"]["objective"], digits=2),
                str(len(m["runs"])), str(len(m["diverged"]))] for name, m in mixes.items()])
    if v.get("predictive"):
        doc.p(_predictive_text(v["predictive"]))
    rows = []
    for name, m in mixes.items():
        pred = m["predicted"] or {}
        for p, w in m["weights"].items():
            rows.append([name, p, f"{w:.3f}", format_number((pred.get("losses") or {}).get(p)),
                         _band((pred.get("bands") or {}).get(p)),
                         format_number(m["measured"]["losses"].get(p)),
                         format_number(m["sd"]["losses"].get(p), digits=2)])
    doc.table(["mixture", "pair", "weight", "predicted", "95% band", "measured", "seed sd"], rows)
    doc.p("Verdict, paired by seed (every mixture trained with the same seeds): d_s = J_baseline,s "
          f"− J_recommended,s; the recommendation beats a baseline when the one-sided paired-t "
          f"p (H1: mean d > 0, n − 1 dof), Holm-corrected over the {len(v['comparisons'])} "
          f"baselines, is below {ALPHA:g}, the mean gap exceeds {SD_MULTIPLE:g} paired sd "
          "(the sd of d_s, ddof 1), and its measured losses meet the maximum losses. A seed where "
          "the recommendation diverged (no finite loss of a trained pair) is a loss; one where "
          "only the baseline diverged leaves the pairing, counted under 'diverged'.")
    doc.table(["baseline", "measured J", "mean gap (baseline − recommended)", "paired sd",
               "n seeds", "n diverged", "p (paired t, one-sided)", "Holm p", "verdict"],
              [[name, format_number(mixes[name]["measured"]["objective"]),
                format_number(c["gap"]), format_number(c["paired_sd"], digits=2),
                str(c["n_seeds"]), str(c["n_diverged"]), format_number(c["p"], digits=2),
                format_number(c["p_holm"], digits=2),
                "beats" if c["beats"] else f"does not beat ({c['why']})"]
               for name, c in v["comparisons"].items()])
    noise = v.get("seed_noise") or {}
    if noise.get("trained"):
        text = ("Seed noise of these runs (relative sd of a pair's final loss across seeds, "
                "pooled over the mixtures that train it at weight > 0): "
                + _noise_text(noise["trained"]) + ".")
        if noise.get("zero_shot"):
            text += (" Pairs at weight 0 (zero-shot, pooled apart, never the noise of a trained "
                     "loss): " + _noise_text(noise["zero_shot"]) + ".")
        doc.p(text)
    bad = {name: m["violations"] for name, m in mixes.items() if m["violations"]}
    if bad:
        doc.p("Measured losses over a maximum loss: " + "; ".join(
            f"{name}: {', '.join(vs)}" for name, vs in bad.items()) + ".")
    if any(w <= 0 for m in mixes.values() for w in m["weights"].values()):
        doc.p("–: a pair at weight 0 is evaluated, not trained (a zero-shot loss), outside "
              "every mixture law's domain: not predicted.")
    if v["notes"]:
        doc.ul(v["notes"])
