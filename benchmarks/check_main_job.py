"""Does a study's report recover the known truth? The main job's five checks from fits.json.

Reads OUT/report/fits.json (and OUT/study.json, for the wall time of the run when given with
--wall-s) of a synthetic study — whose exact irreducible loss is known — and checks:

1. the fitted L∞ within 5 % of the exact L∞ for every pair: the report's fitted L∞, which with
   cool-down branches is the limit N, D → ∞ (E) of L(N, D) across weights fitted on the
   cooled-down budgets (fitting.laws.budget.chinchilla_joint), else the joint law's (Fernandes eq. 7);
   eq. 7's L∞ on the final losses is printed beside it as this budget's. An E that sits at its
   upper bound, the lowest loss measured, fails: it is a bound, not an estimate;
2. α per pair determined: not at a fit bound, perturbation sd below 15 % of the value, and the
   per-weight α (eq. 6) agreeing across weights within 2 sd;
3. f(p) (eq. 10) strictly between 0 and 1 at interior weights, with sd below 0.1;
4. every held-out run (never fitted; its seeds' mean) predicted within 2 % or within 3× its
   measured seed sd — of its own seeds where it has several, else the study's seed noise, else
   no noise clause (fitting.report.heldout) — by the law the report leads with (L(N, D) at the
   run's own N and D where there are branches, else eq. 11); the line says which clause holds
   and which noise;
5. the regime read on cooled-down budgets (Hägele et al. 2024): the report's regime method is
   "cooled-down branches". Its verdict — "near convergence" when more than half of the
   (run, pair) cooled-down losses fall by less than 1 % per doubling of the token budget D
   between the run's last two budgets, else "compute-limited" — is printed with the number of
   converged curves and the median drop per doubling; a compute-limited verdict is a finding,
   not a failure, since the fitted L∞ of check 1 is the limit N, D → ∞. A study without
   cool-down branches fails this check (its report judges the slope before the cool-down).

    python benchmarks/check_main_job.py mnmt_study_out [--json]

The backtest of the leading L(N, D) law (refitted without the largest size, against 3× the seed
noise where the study repeated seeds, else against its residual sd) is printed for information.

Exit status 0 when every check passes, 1 otherwise (2: no report).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from fitting.laws.size.power import ALPHA_BOUNDS  # the fit bounds of α
from fitting.report.chinchilla import COOLED_LAW  # the L∞ source that can be a bound (check 1)
from fitting.report.regime import METHOD_BRANCHES  # the regime method of check 5


def _joint(fits: dict) -> tuple[dict, dict]:
    return (fits.get("joint") or {}).get("params", {}), (fits.get("joint") or {}).get("stderr", {})


def check(fits: dict) -> dict:
    out: dict = {}
    pairs = sorted(fits.get("regime", {}).get("pairs", {}))
    # 1. L∞
    l_inf = {}
    at_lowest = set((((fits.get("chinchilla") or {}).get("joint") or {}).get("meta") or {})
                    .get("e_at_lowest_loss") or [])
    for pair in pairs:
        d = fits["regime"]["pairs"][pair]
        fit, true = d.get("l_inf_fit"), d.get("l_inf_true")
        bound = pair in at_lowest and str(d.get("l_inf_source") or "").startswith(COOLED_LAW)
        err = None if fit is None or not true else fit / true - 1
        l_inf[pair] = {"fit": fit, "true": true, "error": err, "source": d.get("l_inf_source"),
                       "budget": d.get("l_inf_budget"), "at_lowest_loss": bound,
                       "ok": err is not None and abs(err) <= 0.05 and not bound}
    out["l_inf"] = l_inf
    # 2. α
    params, stderr = _joint(fits)
    alpha = {}
    for pair in pairs:
        a, sd = params.get(f"alpha[{pair}]"), stderr.get(f"alpha[{pair}]")
        per_weight = {w: (f["params"]["alpha"], (f.get("stderr") or {}).get("alpha"))
                      for w, f in (fits.get("power") or {}).get(pair, {}).items()}
        agree = True
        items = [(w, v, s) for w, (v, s) in per_weight.items() if s is not None and math.isfinite(s)]
        for i, (_, v1, s1) in enumerate(items):
            for _, v2, s2 in items[i + 1:]:
                agree &= abs(v1 - v2) <= 2 * math.hypot(s1, s2)
        at_bound = a is not None and min(abs(a - b) for b in ALPHA_BOUNDS) < 1e-3
        rel = None if a is None or sd is None else sd / a
        alpha[pair] = {"alpha": a, "sd": sd, "rel_sd": rel, "at_bound": at_bound,
                       "per_weight": per_weight, "per_weight_agree": agree,
                       "ok": a is not None and not at_bound and rel is not None and rel < 0.15
                       and agree}
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
    out["all_ok"] = all(v["ok"] for section in ("l_inf", "alpha", "fraction")
                        for v in out[section].values()) and out["heldout"]["ok"] \
        and out["regime"]["ok"]
    return out


def _regime(regime: dict) -> dict:
    """Check 5: the regime read on cooled-down budgets (method "cooled-down branches")."""
    curves = [c for by_pair in (regime.get("runs") or {}).values() for c in by_pair.values()]
    drops = sorted(c["cooled_drop_per_doubling"] for c in curves)
    median = None
    if drops:
        k = len(drops) // 2
        median = drops[k] if len(drops) % 2 else (drops[k - 1] + drops[k]) / 2
    method = regime.get("method")
    return {"method": method, "verdict": regime.get("verdict"), "n_curves": len(curves),
            "n_converged": sum(bool(c["converged"]) for c in curves),
            "median_drop_per_doubling": median,
            "ok": method == METHOD_BRANCHES}


def _num(value) -> str:
    return "?" if value is None else f"{value:.4g}"


def _print(result: dict) -> None:
    for pair, d in result["l_inf"].items():
        err = "?" if d["error"] is None else f"{100 * d['error']:+.1f} %"
        budget = "" if d["budget"] is None else f"; this budget's (eq. 7) {_num(d['budget'])}"
        bound = " (E at the lowest loss measured: a bound, not an estimate)" \
            if d["at_lowest_loss"] else ""
        print(f"1. L_inf {pair}: fitted {_num(d['fit'])} vs exact {_num(d['true'])} ({err}) "
              f"{'ok' if d['ok'] else 'FAIL'}{bound} [{d['source']}{budget}]")
    for pair, d in result["alpha"].items():
        rel = "?" if d["rel_sd"] is None else f"{100 * d['rel_sd']:.0f} %"
        print(f"2. alpha {pair}: {_num(d['alpha'])} ± {_num(d['sd'])} (sd {rel}), "
              f"at bound {d['at_bound']}, "
              f"per weight agree {d['per_weight_agree']} {'ok' if d['ok'] else 'FAIL'}")
    for pair, d in result["fraction"].items():
        pts = ", ".join(f"f({w})={v['f']:.3f}±{v['sd']:.3f}" for w, v in d["points"].items())
        print(f"3. f(p) {pair}: {pts or 'none'} {'ok' if d['ok'] else 'FAIL'}")
    for h in result["heldout"]["entries"]:
        noise = ("no seed noise: 2 % clause only" if h.get("noise") is None else
                 f"3x seed sd {h['noise']:.4f}, {h.get('noise_source')}, {h.get('noise_dof')} dof")
        print(f"4. held out {h['run']} {h['pair']}: predicted {h['predicted']:.4f}, measured "
              f"{h['measured']:.4f} (mean of {h.get('seeds', 1)} seeds; "
              f"{100 * h['error']:+.2f} %; {noise}) {'ok' if h['within_tolerance'] else 'FAIL'}"
              + (" (within 2 %)" if h.get("within_rel") else
                 " (within 3x seed sd)" if h["within_tolerance"] else "")
              + f" [{h['law']}]")
    if not result["heldout"]["entries"]:
        print("4. held-out runs: none FAIL")
    r = result["regime"]
    if r["method"] != METHOD_BRANCHES:
        print(f"5. regime: the study has no cool-down branches (method: {r['method']}, verdict "
              f"{r['verdict']}) FAIL")
    else:
        med = r["median_drop_per_doubling"]
        print(f"5. regime ({r['method']}): {r['verdict']}, {r['n_converged']} of {r['n_curves']} "
              f"curves converged, median drop "
              f"{'?' if med is None else f'{100 * med:.2f} %'} per doubling of D "
              f"{'ok' if r['ok'] else 'FAIL'}")
    for pair, bt in result["backtest"].items():
        print(f"   backtest {pair} (information): without N = {bt['held_out_n']:.4g}, RMSE "
              f"{100 * bt['rmse_rel']:.2f} % (mean {100 * bt['mean_rel']:+.2f} %) vs "
              f"{bt['tolerance']:g}x noise {100 * bt['noise_rel']:.2f} % ({bt['noise_source']}): "
              f"{'within' if bt['within'] else 'beyond'}")
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
        _print(result)
    return 0 if result["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
