"""Does a study's report recover the known truth? The main job's six checks from fits.json.

Reads OUT/report/fits.json (and OUT/study.json, for the wall time of the run when given with
--wall-s) of a synthetic study — whose exact irreducible loss is known — and checks:

1. for every pair, the fitted L∞ of the law the report asks for (fits.json
   ``regime.l_inf_law``): with cool-down branches the limit N, D → ∞ (E) of L(N, D) across
   weights fitted on the cooled-down budgets (fitting.laws.budget.chinchilla_joint), else the joint
   law's (Fernandes eq. 7) — within 5 % of the exact L∞, and an estimate: a value flagged as a
   bound (``regime.pairs[pair].l_inf_is_bound``: E at or above the lowest loss measured, or at
   0, in either form of L(N, D)) fails however close it lands. A pair whose L∞ comes from
   another law, or has none (``l_inf_missing`` says why), fails: eq. 7's L∞ on the final losses
   is this budget's asymptote, printed beside it, never judged in its place. Without an exact
   L∞ in fits.json (not a synthetic study) the check cannot judge and says "information"; a
   fits.json written before ``l_inf_law`` / ``l_inf_is_bound`` existed fails with a message;
2. α per pair determined: not at a fit bound, perturbation sd below 15 % of the value, and the
   per-weight α (eq. 6) agreeing across weights within 2 sd (fewer than 2 per-weight α with an
   sd leave nothing to compare: FAIL, as the main job fits a weight grid);
3. f(p) (eq. 10) strictly between 0 and 1 at interior weights, with sd below 0.1;
4. every held-out run (never fitted; its seeds' mean) predicted within 2 % or within 3× its
   measured seed sd — of its own seeds where it has several, else the study's seed noise, else
   no noise clause (fitting.report.sections.heldout) — by the law the report leads with (L(N, D) at the
   run's own N and D where there are branches, else eq. 11); the line says which clause holds
   and which noise;
5. the regime is read where check 1's L∞ can be trusted whatever it says: ok when the report's
   regime method is "cooled-down branches" (Hägele et al. 2024), its verdict was computed from
   ≥ 3 cooled-down curves (run, trained pair) of every pair, and every pair's fitted L∞ is the
   limit N, D → ∞ of the cooled-down law (so a compute-limited study is not judged by one
   budget's asymptote); FAIL otherwise, e.g. a study without cool-down branches (its report
   judges the slope before the cool-down) or with too few budgets per run. The verdict itself
   — "near convergence" when more than half of the curves fall by less than 1 % per doubling of
   the token budget D between the run's last two budgets, else "compute-limited" — is a finding
   about the study, not a pass or a failure of the pipeline: it is printed as "information",
   with the number of converged curves and the median drop per doubling;
6. the report's first section ("How far the predictions can be trusted", fits.json
   ``extrapolation``) was written and computed a larger-size row for every pair: a report whose
   section failed (listed under fits.json ``skipped``) or left a pair's larger-size row "not
   computed" fails — the writer keeps a section's failure to one line, so without this check a
   broken first section would pass every other check. Its rows' verdicts (holds / does not hold:
   RMSE within k·σ, k = 3 or Student's t quantile on σ's dof where larger, σ the seed noise or,
   for per-step curve points, their per-point scatter) are findings about the study, printed as
   information.

    python benchmarks/studies/check_main_job.py mnmt_study_out [--json]

The backtest of the leading L(N, D) law (refitted without the largest size, against its
tolerance × the seed noise where the study repeated seeds, else not judged) is printed for
information, and so are the report's curve-law continuations (fits.json ``curves``,
fitting.report.sections.curves): per pair, the cooled-down ends of the branches and parents no
fit saw, predicted by the LR-annealing law fitted on each parent's stable phase and one branch —
median, worst and RMSE relative error against k·σ (σ: the probe loss's per-point scatter, or the
seed noise of evaluated ends; its ``sigma_source``), with the report's verdict.

Every check prints the rule it applied (``RULES``), then per item "ok", "FAIL" or
"information" (what it cannot judge, or a finding that no rule turns into a pass or a failure).
A check with nothing to judge is never "ok": the main job always has pairs and held-out runs,
so a fits.json without them fails checks 1–6 with a message (``checks[k]``: each check's
status and reason). Exit status 0 when no check fails, 1 otherwise (2: no report).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from fitting.laws.size.power import ALPHA_BOUNDS  # the fit bounds of α
from fitting.report.sections.chinchilla import COOLED_LAW  # check 1 with branches (check 5)
from fitting.report.sections.extrapolation import LARGER_SIZE  # check 6: row kind per pair
from fitting.report.sections.heldout import NOISE_TOLERANCE  # check 4's multiple of the seed sd
from fitting.report.sections.regime import METHOD_BRANCHES  # the regime method of check 5
from fitting.report.writer import EXTRAPOLATION_SKIPPED  # the skipped key of a failed section

#: check 1's tolerance on the fitted L∞ against the exact one
L_INF_TOLERANCE = 0.05
#: check 5: cooled-down curves per pair the regime verdict must rest on (a majority of fewer is
#: one curve's say)
MIN_CURVES_PER_PAIR = 3
#: the rule each check applies, as printed
RULES = {
    1: f"the fitted L∞ of the law the report asks for within {L_INF_TOLERANCE:.0%} of the exact "
       "L∞, and an estimate, not a bound",
    2: "α not at a fit bound, sd < 15 % of α, per-weight α agreeing within 2 sd",
    3: "f(p) strictly between 0 and 1 at interior weights, sd < 0.1",
    4: "every held-out run within 2 % or 3x its seed sd, by the law the report leads with",
    5: f"regime read on cooled-down branches, ≥ {MIN_CURVES_PER_PAIR} cooled-down curves per "
       "pair, every pair's fitted L∞ the limit N, D → ∞ of the cooled-down law; the verdict is "
       "information",
    6: "the report's first section (extrapolation) written, a larger-size row computed for "
       "every pair; each row's verdict is information",
}
#: what check 1 says of a fits.json written before the fields it reads existed
OLD_FITS = ("fits.json has no regime.l_inf_law / regime.pairs[pair].l_inf_is_bound (written "
            "before they existed): cannot tell which law gave the fitted L∞ nor an estimate "
            "from a bound; re-run the study's `mnmt-study run … --out OUT` (finished runs are "
            "skipped, the report is rewritten)")


def _joint(fits: dict) -> tuple[dict, dict]:
    joint = fits.get("joint") or {}
    return joint.get("params") or {}, joint.get("stderr") or {}


def check(fits: dict) -> dict:
    out: dict = {}
    pairs = sorted(fits.get("regime", {}).get("pairs", {}))
    # 1. L∞
    out["l_inf"] = {pair: _l_inf(fits["regime"], pair) for pair in pairs}
    # 2. α
    params, stderr = _joint(fits)
    alpha = {}
    for pair in pairs:
        a, sd = params.get(f"alpha[{pair}]"), stderr.get(f"alpha[{pair}]")
        per_weight = {w: (f["params"]["alpha"], (f.get("stderr") or {}).get("alpha"))
                      for w, f in (fits.get("power") or {}).get(pair, {}).items()}
        items = [(w, v, s) for w, (v, s) in per_weight.items() if s is not None and math.isfinite(s)]
        agree: bool | None = None if len(items) < 2 else True  # None: nothing to compare
        for i, (_, v1, s1) in enumerate(items):
            for _, v2, s2 in items[i + 1:]:
                agree &= abs(v1 - v2) <= 2 * math.hypot(s1, s2)
        at_bound = a is not None and min(abs(a - b) for b in ALPHA_BOUNDS) < 1e-3
        rel = None if a is None or sd is None else sd / a
        alpha[pair] = {"alpha": a, "sd": sd, "rel_sd": rel, "at_bound": at_bound,
                       "per_weight": per_weight, "per_weight_agree": agree,
                       "per_weight_compared": len(items),
                       "ok": a is not None and not at_bound and rel is not None and rel < 0.15
                       and bool(agree)}
    out["alpha"] = alpha
    # 3. f(p)
    fraction = {}
    for pair in pairs:
        points = {w: d for w, d in (fits.get("fraction") or {}).get(pair, {}).items()
                  if 0 < float(w) < 1}
        ok = bool(points) and all(0 < d["f"] < 1 and d.get("sd") is not None and d["sd"] < 0.1
                                  for d in points.values())
        fraction[pair] = {"points": points, "ok": ok}
    out["fraction"] = fraction
    # 4. held-out runs
    held = [h for h in fits.get("heldout", []) if h.get("primary", True)]
    out["heldout"] = {"entries": held, "ok": bool(held) and all(h["within_tolerance"]
                                                                for h in held)}
    # 5. regime, from the cooled-down branches
    out["regime"] = _regime(fits.get("regime", {}))
    out["backtest"] = ((fits.get("chinchilla") or {}).get("joint") or {}).get("backtest") or {}
    out["curves"] = _curves(fits.get("curves"))
    out["extrapolation"] = _extrapolation(fits, pairs)
    out["rules"] = RULES
    out["checks"] = _checks(out, pairs)
    out["all_ok"] = all(c["status"] != "FAIL" for c in out["checks"].values())
    return out


def _checks(out: dict, pairs: list[str]) -> dict[int, dict]:
    """Each check's ``status`` ("ok", "FAIL", "information") and ``reason``: a check with
    nothing to judge (no pair, no held-out run) fails with a message, never passes (all() of an
    empty list is True); check 1 is "information" when it could judge no pair (no exact L∞)."""
    def per_pair(ok: list[bool]) -> tuple[str, str]:
        if not pairs:
            return "FAIL", "no pair in fits.json's regime (the main job always has pairs)"
        return ("ok", "") if all(ok) else ("FAIL", "a pair fails")

    l_inf = [d["status"] for d in out["l_inf"].values()]
    c1 = per_pair([s != "FAIL" for s in l_inf])
    if c1[0] == "ok" and "ok" not in l_inf:
        c1 = ("information", "no pair could be judged (no exact L∞)")
    held = out["heldout"]
    if not held["entries"]:
        c4 = ("FAIL", "no held-out run in fits.json (the main job always holds runs out)")
    else:
        c4 = ("ok", "") if held["ok"] else ("FAIL", "a run fails")
    checks = (c1, per_pair([d["ok"] for d in out["alpha"].values()]),
              per_pair([d["ok"] for d in out["fraction"].values()]), c4,
              (out["regime"]["status"], out["regime"]["reason"]),
              (out["extrapolation"]["status"], out["extrapolation"]["reason"]))
    return {k: {"status": st, "reason": why} for k, (st, why) in enumerate(checks, 1)}


def _l_inf(regime: dict, pair: str) -> dict:
    """Check 1 for ``pair`` (module docstring): ``status`` "ok", "FAIL" or "information" and
    ``reason``; ``ok`` is status == "ok"."""
    d = regime["pairs"][pair]
    fit, true = d.get("l_inf_fit"), d.get("l_inf_true")
    asked, law, bound = regime.get("l_inf_law"), d.get("l_inf_law"), d.get("l_inf_is_bound")
    err = None if fit is None or not true else fit / true - 1
    if asked is None or (fit is not None and bound is None):
        status, reason = "FAIL", OLD_FITS
    elif law != asked:
        status, reason = "FAIL", (f"no L∞ from the law asked for ({asked}): "
                                  + (d.get("l_inf_missing") or f"the fitted L∞ is {law}'s"))
    elif bound:
        status, reason = "FAIL", "a bound (E at the lowest loss measured or at 0), not an estimate"
    elif fit is None:
        status, reason = "FAIL", (f"the law asked for ({asked}) gave no finite positive L∞ "
                                  "(fits.json has no l_inf_fit)")
    elif not true:
        status, reason = "information", "no exact L∞ in fits.json: nothing to judge against"
    elif abs(err) > L_INF_TOLERANCE:
        status, reason = "FAIL", f"more than {L_INF_TOLERANCE:.0%} from the exact L∞"
    else:
        status, reason = "ok", f"within {L_INF_TOLERANCE:.0%}"
    return {"fit": fit, "true": true, "error": err, "source": d.get("l_inf_source"),
            "budget": d.get("l_inf_budget"), "law": law, "asked_law": asked, "is_bound": bound,
            "status": status, "reason": reason, "ok": status == "ok"}


def _regime(regime: dict) -> dict:
    """Check 5 (module docstring): ``status`` "ok" or "FAIL" with ``reason``; the verdict, the
    curves per pair, the converged ones and the median drop per doubling are information."""
    curves = [(pair, c) for by_pair in (regime.get("runs") or {}).values()
              for pair, c in by_pair.items()]
    drops = sorted(c["cooled_drop_per_doubling"] for _, c in curves)
    median = None
    if drops:
        k = len(drops) // 2
        median = drops[k] if len(drops) % 2 else (drops[k - 1] + drops[k]) / 2
    pairs = sorted(regime.get("pairs") or {})
    per_pair = {p: sum(q == p for q, _ in curves) for p in pairs}
    method = regime.get("method")
    laws = {p: regime["pairs"][p].get("l_inf_law") for p in pairs}
    if method != METHOD_BRANCHES:
        reason = f"the study has no cool-down branches (method: {method})"
    elif not pairs:
        reason = "no pair in fits.json's regime"
    elif any(n < MIN_CURVES_PER_PAIR for n in per_pair.values()):
        reason = (f"fewer than {MIN_CURVES_PER_PAIR} cooled-down curves for "
                  + ", ".join(f"{p} ({n})" for p, n in per_pair.items()
                              if n < MIN_CURVES_PER_PAIR))
    elif regime.get("l_inf_law") is None:
        reason = OLD_FITS
    elif any(law != COOLED_LAW for law in laws.values()):
        reason = ("the fitted L∞ is not the limit N, D → ∞ of the cooled-down law for "
                  + ", ".join(p for p, law in laws.items() if law != COOLED_LAW))
    else:
        reason = ""
    return {"method": method, "verdict": regime.get("verdict"), "n_curves": len(curves),
            "curves_per_pair": per_pair,
            "n_converged": sum(bool(c["converged"]) for _, c in curves),
            "median_drop_per_doubling": median, "status": "FAIL" if reason else "ok",
            "reason": reason, "verdict_status": "information", "ok": not reason}


def _extrapolation(fits: dict, pairs: list[str]) -> dict:
    """Check 6 (module docstring): ``status`` "ok" or "FAIL" with ``reason``; ``rows`` the
    section's rows (their verdicts are information)."""
    section = fits.get("extrapolation") or {}
    rows = list(section.get("rows") or [])
    computed = {r.get("pair") for r in rows if r.get("kind") == LARGER_SIZE
                and not str(r.get("verdict", "")).startswith("not computed")}
    skipped = (fits.get("skipped") or {}).get(EXTRAPOLATION_SKIPPED)
    if skipped:
        reason = f"the section failed: {skipped}"
    elif not rows:
        reason = "fits.json has no extrapolation rows (a report written before the section?)"
    elif not pairs:
        reason = "no pair in fits.json's regime"
    elif missing := [p for p in pairs if p not in computed]:
        reason = "no larger-size row computed for " + ", ".join(missing)
    else:
        reason = ""
    return {"rows": rows, "status": "FAIL" if reason else "ok", "reason": reason,
            "ok": not reason}


def _curves(curves: dict | None) -> dict:
    """The curve section's branch-end errors per pair (information): ``pairs`` {pair: n_points,
    n_families, median, worst, rmse, multiple, three_sigma (multiple × σ), sigma_source,
    verdict} and ``skipped`` {pair: why}; empty
    where fits.json has no curve section (no cool-down branches or learning rates)."""
    if not curves:
        return {"pairs": {}, "skipped": {}}
    keys = ("n_points", "n_families", "median", "worst", "rmse", "multiple", "three_sigma",
            "sigma_source", "verdict")
    return {"pairs": {p: {k: d.get(k) for k in keys} for p, d in curves["pairs"].items()},
            "skipped": dict(curves.get("skipped") or {})}


def _pct(value) -> str:
    return "?" if value is None else f"{100 * value:.2f} %"


def _k_sigma(row: dict) -> str:
    """"k·σ = x % (σ's source)" of a judged row: the multiple its verdict used."""
    k = row.get("multiple")
    return (f"{'?' if k is None else f'{k:.3g}'}σ = {_pct(row.get('three_sigma'))}"
            + (f" ({row['sigma_source']})" if row.get("sigma_source") else ""))


def _num(value) -> str:
    return "?" if value is None else f"{value:.4g}"


def print_result(result: dict) -> None:
    """Print every check of :func:`check`'s ``result``: its rule, then per item ok / FAIL /
    information, and the information lines (backtest, cool-down ends)."""
    rules = result.get("rules", RULES)
    print(f"1. rule: {rules[1]}")
    for pair, d in result["l_inf"].items():
        err = "?" if d["error"] is None else f"{100 * d['error']:+.1f} %"
        budget = "" if d["budget"] is None else f"; this budget's (eq. 7) {_num(d['budget'])}"
        print(f"1. L_inf {pair}: fitted {_num(d['fit'])} vs exact {_num(d['true'])} ({err}) "
              f"{d['status']}: {d['reason']} [{d['source'] or 'no fitted L∞'}{budget}]")
    if not result["l_inf"]:
        print("1. L_inf: no pair in fits.json's regime FAIL")
    print(f"2. rule: {rules[2]}")
    for pair, d in result["alpha"].items():
        rel = "?" if d["rel_sd"] is None else f"{100 * d['rel_sd']:.0f} %"
        print(f"2. alpha {pair}: {_num(d['alpha'])} ± {_num(d['sd'])} (sd {rel}), "
              f"at bound {d['at_bound']}, per weight agree "
              + ("not judged (fewer than 2 per-weight α with an sd)"
                 if d["per_weight_agree"] is None else
                 f"{d['per_weight_agree']} ({d.get('per_weight_compared', '?')} of "
                 f"{len(d['per_weight'])} weights compared: those with a finite sd)")
              + f" {'ok' if d['ok'] else 'FAIL'}")
    if not result["alpha"]:
        print(f"2. alpha: {result['checks'][2]['reason']} FAIL")
    print(f"3. rule: {rules[3]}")
    for pair, d in result["fraction"].items():
        pts = ", ".join(f"f({w})={v['f']:.3f}±{_num(v['sd'])}" for w, v in d["points"].items())
        print(f"3. f(p) {pair}: {pts or 'none'} {'ok' if d['ok'] else 'FAIL'}")
    if not result["fraction"]:
        print(f"3. f(p): {result['checks'][3]['reason']} FAIL")
    print(f"4. rule: {rules[4]}")
    for h in result["heldout"]["entries"]:
        noise = ("no seed noise: 2 % clause only" if h.get("noise") is None else
                 f"seed sd {h['noise']:.4f} ({NOISE_TOLERANCE:g}x = "
                 f"{NOISE_TOLERANCE * h['noise']:.4f}), {h.get('noise_source')}, "
                 f"{h.get('noise_seeds', '?')} seeds, {h.get('noise_dof')} dof"
                 + ("" if h.get("noise_judges", True) else
                    ": information, the 2 % clause alone judges"))
        print(f"4. held out {h['run']} {h['pair']}: predicted {h['predicted']:.4f}, measured "
              f"{h['measured']:.4f} (mean of {h.get('seeds', 1)} seeds; "
              f"{100 * h['error']:+.2f} %; {noise}) {'ok' if h['within_tolerance'] else 'FAIL'}"
              + (" (within 2 %)" if h.get("within_rel") else
                 " (within 3x seed sd)" if h["within_tolerance"] else "")
              + f" [{h['law']}]")
    if not result["heldout"]["entries"]:
        print("4. held-out runs: none FAIL")
    r = result["regime"]
    med = r["median_drop_per_doubling"]
    counts = ", ".join(f"{p} {n}" for p, n in r["curves_per_pair"].items())
    print(f"5. rule: {rules[5]}")
    print(f"5. regime ({r['method']}): {r['n_curves']} cooled-down curves ({counts or 'none'}) "
          f"{r['status']}" + (f": {r['reason']}" if r["reason"] else ""))
    print(f"5. regime verdict (information): {r['verdict']}, {r['n_converged']} of "
          f"{r['n_curves']} curves converged, median drop "
          f"{'?' if med is None else f'{100 * med:.2f} %'} per doubling of D")
    larger = {r.get("pair"): r for r in (result.get("extrapolation") or {}).get("rows", [])
              if r.get("kind") == LARGER_SIZE}
    for pair, bt in result["backtest"].items():
        row = larger.get(pair) or {}
        seeds = ("" if row.get("sigma_dof") is None else
                 f", σ from {row.get('sigma_seeds')} seeds, {row['sigma_dof']} dof, first "
                 f"section: {row.get('verdict')}")
        judged = ("not judged: no seed noise measured" if bt.get("noise_rel") is None else
                  f"seed sd {100 * bt['noise_rel']:.2f} % ({bt['tolerance']:.3g}x = "
                  f"{100 * bt['tolerance'] * bt['noise_rel']:.2f} %; {bt['noise_source']}): "
                  f"{'within' if bt['within'] else 'beyond'}{seeds}")
        print(f"   backtest {pair} (information): without N = {bt['held_out_n']:.4g}, RMSE "
              f"{100 * bt['rmse_rel']:.2f} % (mean {100 * bt['mean_rel']:+.2f} %) vs {judged}")
    curves = result.get("curves") or {"pairs": {}, "skipped": {}}
    for pair, c in curves["pairs"].items():
        print(f"   cool-down ends {pair} (information): {c['n_points']} predicted from "
              f"{c['n_families']} parents, median {_pct(c['median'])}, worst {_pct(c['worst'])}, "
              f"RMSE {_pct(c['rmse'])} vs {_k_sigma(c)}: {c['verdict']}")
    for pair, why in curves["skipped"].items():
        print(f"   cool-down ends {pair} (information): not predicted: {why}")
    if not curves["pairs"] and not curves["skipped"]:
        print("   cool-down ends (information): no curve-law section in fits.json (no cool-down "
              "branches with learning rates)")
    ext = result.get("extrapolation") or {"rows": [], "status": "FAIL", "reason": "absent"}
    print(f"6. rule: {rules.get(6, RULES[6])}")
    print(f"6. extrapolation section {ext['status']}" + (f": {ext['reason']}" if ext["reason"]
                                                       else f" ({len(ext['rows'])} rows)"))
    for r in ext["rows"]:
        print(f"   {r.get('kind')} {r.get('pair')} (information): RMSE {_pct(r.get('rmse'))}, "
              f"worst {_pct(r.get('worst'))} vs {_k_sigma(r)} "
              f"(σ from {r.get('sigma_seeds', '?')} measurements, {r.get('sigma_dof', '?')} dof): "
              f"{r.get('verdict')}")
    print("all checks pass" if result["all_ok"] else "some checks fail")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the study's output directory (holding report/fits.json)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    path = os.path.join(args.out, "report", "fits.json")
    if not os.path.exists(path):
        print(f"check_main_job: {path}: no such file (run the study first)", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        result = check(json.load(f))
    if args.json:
        print(json.dumps(result, default=float))
    else:
        print_result(result)
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
