"""The report's section "Verification": the recommended K-pair mixture trained beside baselines.

A study's verification stage (:mod:`mnmt.study.verify`) trains the weights that
``fits.json["mixture"]["recommendation"]`` recommends and the study's baseline mixtures
(uniform, temperatures, UniMax) at one model size with several seeds. Those runs are never
fitted: :func:`split_verification` takes them out of the table before any fit (as held-out runs
are), and :func:`verification_section` sets what they measured against what the law predicted.

* Objective: J(w) = Σ_i π_i L_i(N, w), π the recommendation's normalised preferences
  (``recommendation.constraints.preferences``) — the quantity the recommendation minimised.
* Predicted: the law that made the recommendation (``recommendation.law``) at the verification
  size, with its 95 % bootstrap band per pair (``band()``) and for J (the same percentiles of J
  over the bootstrap refits).
* Measured: J of each run from its final losses; the mean over seeds and the seed sd (sample
  sd, ddof 1) of J and of every pair's loss.
* Verdict per baseline b: the recommendation beats it when mean J_b − mean J_rec > 2 sd_Δ with
  sd_Δ = √(s_rec²/n_rec + s_b²/n_b), the sd of the difference of the two means from the per-seed
  values (independent seeds; Welch), and the recommendation's measured losses meet the
  constraints' maximum losses. Fewer than two seeds on either side: no verdict (False).

Pure numpy/pandas; the law is used through its ``predict`` / ``predict_samples`` methods.
``fits.json["mixture"]["verification"]``: :func:`verification_payload`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from fitting.core.base import FitError
from fitting.core.uncertainty import beyond_sd, percentile_range
from fitting.data.schema import RECOMMENDED
from fitting.data.tables import final_losses
from fitting.laws.mixture.transfer import pooled_seed_noise
from fitting.report.markdown import Document, format_number

__all__ = ["RECOMMENDED", "SD_MULTIPLE", "split_verification", "compare_means",
           "predict_mixtures", "verification_payload", "verification_section",
           "verification_seed_noise"]

#: the recommendation beats a baseline by more than this many sd of the difference of means
SD_MULTIPLE = 2.0
_PLAN_KEYS = ("size", "seeds", "mixtures", "runs")


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


def split_verification(table: pd.DataFrame, plan: Mapping | None
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table without the verification runs, their rows): the runs of ``plan["runs"]`` and
    their cool-down branches, which no fit may see."""
    if not plan or "run_id" not in table.columns:
        return table, table.iloc[:0]
    ids = {str(r) for r in plan["runs"]}
    mask = table["run_id"].astype(str).isin(ids)
    if "parent_run" in table.columns:
        mask |= table["parent_run"].astype(str).isin(ids)
    return table[~mask], table[mask]


def compare_means(rec: Sequence[float], base: Sequence[float], *,
                  multiple: float = SD_MULTIPLE) -> dict:
    """Does the recommendation (per-seed objectives ``rec``) beat a baseline (``base``)?

    gap = mean(base) − mean(rec) (positive: the recommendation is better); sd = the sd of that
    difference of means, √(s_r²/n_r + s_b²/n_b) with sample sd s (ddof 1); beats when gap >
    ``multiple`` · sd. ``p``: the one-sided p-value of Welch's t = gap / sd with the
    Welch–Satterthwaite degrees of freedom — with two seeds a side a 2-sd gap still happens by
    chance about 9 % of the time (t on 2 dof), which the report shows beside the verdict. NaN
    values are left out; fewer than two values on either side: sd NaN, beats False."""
    r = np.asarray([v for v in rec if np.isfinite(v)], float)
    b = np.asarray([v for v in base if np.isfinite(v)], float)
    gap = float(b.mean() - r.mean()) if len(r) and len(b) else float("nan")
    if len(r) < 2 or len(b) < 2:
        return {"gap": gap, "sd": float("nan"), "beats": False, "n": [len(r), len(b)],
                "why": "fewer than 2 seeds measured"}
    a, c = r.var(ddof=1) / len(r), b.var(ddof=1) / len(b)
    sd = math.sqrt(a + c)
    return {"gap": gap, "sd": sd, "beats": beyond_sd(gap, sd, multiple), "n": [len(r), len(b)],
            "p": _welch_p(gap, a, c, len(r), len(b))}


def _welch_p(gap: float, a: float, c: float, n_r: int, n_b: int) -> float:
    """One-sided p of Welch's t for gap > 0 (a, c: the squared standard errors of the means)."""
    if a + c <= 0:
        return 0.0 if gap > 0 else 1.0
    dof = (a + c) ** 2 / (a ** 2 / (n_r - 1) + c ** 2 / (n_b - 1))
    return float(stats.t.sf(gap / math.sqrt(a + c), dof))


def _objective(losses: Mapping[str, float], pi: Mapping[str, float]) -> float:
    """J = Σ π_i L_i over the pairs with π_i > 0 (NaN when one of them has no loss)."""
    return float(sum(w * losses.get(p, float("nan")) for p, w in pi.items() if w > 0))


def predict_mixtures(law, n: float, mixtures: Mapping[str, Mapping[str, float]],
                     pi: Mapping[str, float], level: float = 0.95) -> dict[str, dict]:
    """The law's predictions at size ``n`` for each mixture: {name: {objective, band, losses,
    bands}} (bands None without bootstrap refits). NaN where the law cannot predict: at a size
    it cannot reach, and for a pair at weight 0 (untrained: a zero-shot loss, outside every
    mixture law's domain); J counts the pairs with π_i > 0 only."""
    pairs = list(law.pairs or [])
    names = list(mixtures)
    W = np.array([[float(mixtures[m].get(p, 0.0)) for p in pairs] for m in names])
    N = np.full(len(names), float(n))
    pred = np.where(W > 0, law.predict(N, W), np.nan)
    piv = np.array([float(pi.get(p, 0.0)) for p in pairs])
    used = piv > 0
    obj = pred[:, used] @ piv[used]
    lo = hi = olo = ohi = None
    if getattr(law, "boot", None):
        samples = np.where(W > 0, law.predict_samples(N, W), np.nan)  # (refits, mixtures, pairs)
        with warnings.catch_warnings():  # an untrained pair: an all-NaN column, NaN band
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi = percentile_range(samples, level, estimate=pred)
            olo, ohi = percentile_range(samples[..., used] @ piv[used], level, estimate=obj)
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


def verification_payload(plan: Mapping, recommendation: Mapping,
                         measured: Mapping[str, Mapping[str, Mapping[str, float]]],
                         predicted: Mapping[str, dict] | None = None, *,
                         n: float | None = None) -> dict:
    """``fits.json["mixture"]["verification"]``.

    ``measured``: {mixture name: {run_id: {pair: final loss}}} of the verification runs;
    ``predicted``: :func:`predict_mixtures`' result (None: not predicted). Keys: size, n, seeds,
    objective (what J is, its preferences and maximum losses), mixtures {name: {weights,
    predicted, measured, sd, runs, violations}}, beats {baseline: bool}, comparisons {baseline:
    {gap, sd, beats, n}}, sd_rule, notes."""
    check_plan(plan)
    pi = dict(recommendation["constraints"]["preferences"])
    max_loss = dict(recommendation["constraints"].get("max_loss") or {})
    mixtures, per_seed, notes = {}, {}, []
    for name, weights in plan["mixtures"].items():
        runs = measured.get(name, {})
        per_seed[name] = [_objective(losses, pi) for losses in runs.values()]
        pairs = list(pi)
        mean = {p: _mean([r.get(p, float("nan")) for r in runs.values()]) for p in pairs}
        over = [f"loss {p} {mean[p]:.4g} > max {max_loss[p]:.4g}" for p in max_loss
                if p in mean and mean[p] > max_loss[p]]
        mixtures[name] = {
            "weights": dict(weights),
            "predicted": (predicted or {}).get(name),
            "measured": {"objective": _mean(per_seed[name]), "losses": mean,
                         "per_seed": dict(zip(runs, per_seed[name], strict=True))},
            "sd": {"objective": _sd(per_seed[name]),
                   "losses": {p: _sd([r.get(p, float("nan")) for r in runs.values()])
                              for p in pairs}},
            "runs": list(runs), "violations": over}
        expected = sum(1 for v in plan["runs"].values() if v == name)
        if len(runs) < expected:
            notes.append(f"{name}: {len(runs)} of {expected} runs measured")
    rec_weights = recommendation.get("weights") or {}
    planned = plan["mixtures"][RECOMMENDED]
    if any(abs(float(planned.get(p, 0.0)) - float(w)) > 1e-6 for p, w in rec_weights.items()):
        notes.append("the recommendation in this report differs from the weights trained as "
                     "'recommended' (the report changed since they were trained)")
    rec_bad = bool(mixtures[RECOMMENDED]["violations"])
    comparisons, beats = {}, {}
    for name in plan["mixtures"]:
        if name == RECOMMENDED:
            continue
        c = compare_means(per_seed[RECOMMENDED], per_seed[name])
        if rec_bad:
            c = {**c, "beats": False, "why": "the recommendation's measured losses exceed a "
                                             "maximum loss"}
        comparisons[name], beats[name] = c, c["beats"]
    return {
        "size": plan["size"], "n": n, "seeds": list(plan["seeds"]),
        "objective": {"description": "preference-weighted mean loss sum_i pi_i L_i (the "
                                     "recommendation's objective)",
                      "preferences": pi, "max_loss": max_loss,
                      "recommended_for_n": recommendation.get("target_size"),
                      "law": recommendation.get("law")},
        "mixtures": mixtures, "beats": beats, "comparisons": comparisons,
        "sd_rule": f"beats when mean J(baseline) - mean J(recommended) > {SD_MULTIPLE:g} sd, "
                   "sd = sqrt(s_rec^2/n_rec + s_base^2/n_base) from the per-seed J (ddof 1)",
        "notes": notes,
    }


def _measured_losses(table: pd.DataFrame, plan: Mapping, eval_set: str, metric: str
                     ) -> tuple[dict, float | None]:
    """{mixture: {run_id: {pair: final loss}}} of the verification rows, and their size N."""
    out: dict[str, dict] = {name: {} for name in plan["mixtures"]}
    if not len(table):
        return out, None
    fin, _ = final_losses(table, eval_set=eval_set, metric=metric, source="verification",
                          drop_invalid=True)
    for rid, rows in fin.groupby(fin["run_id"].astype(str), sort=True):
        name = plan["runs"].get(rid)
        if name is not None:
            out[name][rid] = {str(p): float(v) for p, v in zip(rows["pair"], rows["value"],
                                                                strict=True)}
    n = pd.to_numeric(fin["n"], errors="coerce").dropna()
    return out, (float(n.iloc[0]) if len(n) else None)


def verification_seed_noise(table: pd.DataFrame, plan: Mapping | None, *,
                            eval_set: str = "validation", metric: str = "loss") -> dict:
    """The study's seed noise measured by its verification runs (several seeds of each mixture
    at one size): :func:`~fitting.laws.mixture.transfer.pooled_seed_noise` of their final
    losses; {} without a plan or runs."""
    if not plan or not len(table):
        return {}
    measured, n = _measured_losses(table, plan, eval_set, metric)
    if n is None:
        return {}
    return pooled_seed_noise((pair, n, name, y) for name, runs in measured.items()
                             for losses in runs.values() for pair, y in losses.items())


def verification_section(doc: Document, rep, table: pd.DataFrame, mixture: dict | None,
                         plan: Mapping | None, laws: Mapping, *, eval_set: str = "validation",
                         metric: str = "loss") -> dict | None:
    """Add the section to ``doc`` and return ``fits.json["mixture"]["verification"]``; None
    without a plan. ``table``: the verification runs' rows (:func:`split_verification`);
    ``mixture``: ``fits.json["mixture"]``; ``laws``: the fitted mixture laws by form."""
    if not plan:
        return None
    doc.h(2, "Verification: the recommendation trained")
    rec = (mixture or {}).get("recommendation")
    if not rec:
        why = "the report has no K-pair recommendation to verify"
        doc.p(f"Skipped: {why}.")
        rep.skipped["verification"] = why
        return {"skipped": why}
    measured, n = _measured_losses(table, plan, eval_set, metric)
    law = laws.get(rec.get("law"))
    predicted = None
    if law is not None and n is not None:
        predicted = predict_mixtures(law, n, plan["mixtures"], rec["constraints"]["preferences"])
    payload = verification_payload(plan, rec, measured, predicted, n=n)
    _markdown(doc, payload, rec)
    rep.warnings += [f"verification: {note}" for note in payload["notes"]]
    return payload


def _band(b) -> str:
    return "–" if not b else f"[{b[0]:.4g}, {b[1]:.4g}]"


def _markdown(doc: Document, v: dict, rec: Mapping) -> None:
    n_text = "" if v["n"] is None else f" (N = {v['n']:.3g})"
    doc.p(f"The recommended weights and the study's baselines trained at {v['size']}{n_text} "
          f"with seeds {', '.join(map(str, v['seeds']))}; never fitted. Predicted by the "
          f"{rec.get('law')} law that made the recommendation (for N = "
          f"{rec.get('target_size', float('nan')):.3g}), with 95 % bootstrap bands. Objective "
          "J = Σ π_i L_i, the preference-weighted mean loss the recommendation minimised (π: "
          + ", ".join(f"{p} {w:.3g}" for p, w in v["objective"]["preferences"].items()) + ").")
    mixes = v["mixtures"]
    pairs = list(next(iter(mixes.values()))["weights"])
    doc.table(["mixture", f"weights ({' '.join(pairs)})", "predicted J", "95% band", "measured J", "seed sd", "runs"],
              [[name, " ".join(f"{w:.3f}" for w in m["weights"].values()),
                format_number((m["predicted"] or {}).get("objective")),
                _band((m["predicted"] or {}).get("band")),
                format_number(m["measured"]["objective"]), format_number(m["sd"]["objective"],
                                                                         digits=2),
                str(len(m["runs"]))] for name, m in mixes.items()])
    rows = []
    for name, m in mixes.items():
        pred = m["predicted"] or {}
        for p, w in m["weights"].items():
            rows.append([name, p, f"{w:.3f}", format_number((pred.get("losses") or {}).get(p)),
                         _band((pred.get("bands") or {}).get(p)),
                         format_number(m["measured"]["losses"].get(p)),
                         format_number(m["sd"]["losses"].get(p), digits=2)])
    doc.table(["mixture", "pair", "weight", "predicted", "95% band", "measured", "seed sd"], rows)
    doc.p("Verdict: the recommendation beats a baseline when its mean J is lower by more than "
          f"{SD_MULTIPLE:g} sd of the difference of the two means, sd = √(s_rec²/n_rec + "
          "s_base²/n_base) from the per-seed J, and its measured losses meet the maximum losses.")
    doc.table(["baseline", "measured J", "gap (baseline − recommended)", "sd of gap",
               "beats by > 2 sd", "p (Welch, one-sided)"],
              [[name, format_number(mixes[name]["measured"]["objective"]),
                format_number(c["gap"]), format_number(c["sd"], digits=2),
                ("yes" if c["beats"] else "no") + (f" ({c['why']})" if c.get("why") else ""),
                format_number(c.get("p"), digits=2)]
               for name, c in v["comparisons"].items()])
    bad = {name: m["violations"] for name, m in mixes.items() if m["violations"]}
    if bad:
        doc.p("Measured losses over a maximum loss: " + "; ".join(
            f"{name}: {', '.join(vs)}" for name, vs in bad.items()) + ".")
    if any(w <= 0 for m in mixes.values() for w in m["weights"].values()):
        doc.p("–: a pair at weight 0 is evaluated, not trained (a zero-shot loss), outside "
              "every mixture law's domain: not predicted.")
    if v["notes"]:
        doc.ul(v["notes"])
