"""Why does L(N, D) across weights miss the main job's held-out run? Refits on finished studies.

Reads finished main-job outputs (``OUT/seed<K>/metrics.csv`` and ``report/fits.json``, or any
directory given with ``--study``) and refits, on the same cooled-down budgets the report fits
(:func:`fitting.report.chinchilla.chinchilla_points` on the view without the held-out runs),
the pair's law in the form and with the budgets the report chose (``fits.json``
``chinchilla.joint.meta``), then varies one thing at a time. Nothing is trained; no experiment
sees the held-out runs except to be graded by them. Per study and pair:

1. **E** — the law refitted with E fixed at the exact L∞ (``fits.json`` ``ground_truth``),
   everything else free, in the chosen form and in the other one: the held-out run's error
   and the larger-size backtest (the largest fitted size predicted from the smaller ones, at
   its chosen budgets), against the same with E free;
2. **depth** — the "effective N" at which the law (E free, E fixed) reaches the held-out
   run's measured loss at its D and weight (N_eff / N < 1: the run learns less than its N
   promises), and the local exponent of the excess over the exact L∞, L / L∞ − 1, between
   consecutive sizes of the fitted ladder and from its largest size to the held-out run (at
   each run's own end; the ladder's excess at the held-out weight interpolated in log between
   the two fitted weights around it);
3. **D** — the law fitted on the cool-down branches only (each run's own end left out; the
   branches end with a cool-down of 10 % of their steps, the runs' own ends with 20 %)
   predicting every run's own end and the held-out run, E free and E fixed;
4. **weight p** — the held-out run predicted with the coefficients of the fitted weights
   around its own (its N and D), against the interpolated share the report uses, and the
   backtest's error per weight;
5. **per-study fit summary** — E, α, β, the selection's errors in N and in D, for comparing
   the studies where the law holds with those where it does not.

Beside experiment 1: the law's N → ∞ limit at the held-out run's D (E plus the data term
there; table 1b) and a profile in E (table 1c: E fixed at 0.85 … 1.03 × the exact L∞, the
fit's own relative RMSE against the held-out error — how well the fitted points pin E). The
fixed-E fits use the exact L∞ of a synthetic study: they are diagnostics, not a method. The
E-free fits are the package's own (``fit_joint_chinchilla``, reproducing ``fits.json``); the fixed-E fits
are this script's (:func:`fit_fixed_e`: the same relative residuals, starts and soft_l1 rule).

    nice -n 10 python benchmarks/heldout_bias.py --out judged --seeds 10 11 12 13 14 \\
        --study B_seed4 [--json]

About 300 small least-squares fits: 15–20 s of CPU for six studies.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys

import numpy as np
import pandas as pd
from scipy.optimize import brentq, least_squares

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from fitting.data.tables import read_table  # noqa: E402
from fitting.laws.budget.chinchilla_joint import (  # noqa: E402
    EXPONENT_BOUNDS,
    JointChinchillaFit,
    budget_rank,  # noqa: E402
    fit_joint_chinchilla,
)
from fitting.laws.budget.kaplan_nd import KAPLAN_EXPONENT_BOUNDS  # noqa: E402
from fitting.report.chinchilla import chinchilla_points  # noqa: E402
from fitting.report.view import prepare_view  # noqa: E402

_STARTS = {"alpha": (0.5, 1.5), "beta": (0.7, 2.0, 4.0), "E": (0.5, 0.9)}
_OTHER = {"kaplan": "additive", "additive": "kaplan"}
#: E fixed at these fractions of the exact L∞ in the profile of experiment 1
PROFILE = (0.85, 0.9, 0.95, 1.0, 1.03)


def load_study(path: str) -> dict:
    """The fitted points, the held-out runs' seed means, the exact L∞ and the report's choice
    of form and budgets of one finished study."""
    fits = json.load(open(os.path.join(path, "report", "fits.json"), encoding="utf-8"))
    view = prepare_view(read_table(os.path.join(path, "metrics.csv")),
                        heldout_runs=fits["heldout_runs"])
    pts, _, why = chinchilla_points(view.table_fit, view.eval_set, view.metric, view.budgets_fit)
    if why:
        raise SystemExit(f"{path}: {why}")
    joint = fits["chinchilla"]["joint"]
    out = {"path": path, "truth": fits.get("ground_truth") or {}, "pairs": {}}
    for pair, g in pts.groupby("pair"):
        h = view.held[view.held["pair"] == pair]
        sel = joint["meta"]["selection"][pair]
        out["pairs"][str(pair)] = {
            "n": g["n"].to_numpy(float), "d": g["tokens"].to_numpy(float),
            "p": g["weight"].to_numpy(float), "y": g["value"].to_numpy(float),
            "held": {"n": float(h["n"].iloc[0]), "d": float(h["tokens"].mean()),
                     "p": float(h["weight"].iloc[0]), "y": float(h["value"].mean()),
                     "sd": float(h["value"].std(ddof=1)) if len(h) > 1 else None,
                     "seeds": len(h)},
            "form": sel["form"], "budgets": int(sel["budgets"]),
            "E_shipped": float(joint["params"][f"E[{pair}]"]), "selection": sel}
    return out


def _law(form, e, alpha, beta, la, lb, ln_n, ln_d):
    """The law from log-scales: Kaplan's E + [(A/N)^(α/β) + B/D]^β (A, B = e^la, e^lb), or the
    additive E + e^la N^−α + e^lb D^−β."""
    with np.errstate(over="ignore", invalid="ignore"):
        if form == "kaplan":
            return e + (np.exp((alpha / beta) * (la - ln_n)) + np.exp(lb - ln_d)) ** beta
        return e + np.exp(la - alpha * ln_n) + np.exp(lb - beta * ln_d)


def fit_fixed_e(n, d, p, y, form: str, e: float) -> dict:
    """One pair's law with E fixed at ``e`` (relative residuals; least squares from a grid of
    starts, then soft_l1 with the package's f_scale rule, as
    :func:`fitting.laws.budget.kaplan_nd.fit_pair_kaplan`). The package's raw-dict layout."""
    ws = np.unique(p)
    k, idx = ws.size, np.searchsorted(ws, p)
    ln_n, ln_d = np.log(n), np.log(d)
    lo, hi = KAPLAN_EXPONENT_BOUNDS if form == "kaplan" else EXPONENT_BOUNDS
    lower = np.r_[lo, lo, np.full(2 * k, -400.0)]
    upper = np.r_[hi, hi, np.full(2 * k, 400.0)]

    def resid(q):
        r = _law(form, e, q[0], q[1], q[2:2 + k][idx], q[2 + k:][idx], ln_n, ln_d) / y - 1.0
        return np.where(np.isfinite(r), r, 1e6)

    half = max(float(np.median(y)) - e, 1e-6) / 2
    best = None
    for a, b in itertools.product(_STARTS["alpha"], _STARTS["beta"]):
        if form == "kaplan":
            la, lb = np.median(ln_n) + np.log(half) / a, np.median(ln_d) + np.log(half) / b
        else:
            la, lb = np.log(half) + a * np.median(ln_n), np.log(half) + b * np.median(ln_d)
        q0 = np.clip(np.r_[a, b, np.full(k, la), np.full(k, lb)], lower + 1e-9, upper - 1e-9)
        r = least_squares(resid, q0, bounds=(lower, upper), x_scale="jac", max_nfev=400)
        if best is None or r.cost < best.cost:
            best = r
    scale = max(1.4826 * float(np.median(np.abs(best.fun))), 1e-3)
    best = least_squares(resid, best.x, bounds=(lower, upper), loss="soft_l1", f_scale=scale,
                         x_scale="jac", max_nfev=800)
    q = best.x
    out = {"E": float(e), "alpha": float(q[0]), "beta": float(q[1])}
    for j, w in enumerate(ws):
        # back to the package's scales: Kaplan's A, B are e^la, e^lb; the additive A, B too
        out[("A", float(w))] = float(np.exp(q[2 + j]))
        out[("B", float(w))] = float(np.exp(q[2 + k + j]))
    return out


def _points(n, d, p, y) -> pd.DataFrame:
    return pd.DataFrame({"pair": "x", "n": n, "tokens": d, "weight": p, "value": y})


def fit(n, d, p, y, form: str, e: float | None = None) -> dict:
    """The package's fit (:func:`fitting.laws.budget.chinchilla_joint.fit_joint_chinchilla`,
    soft_l1, f_scale auto, no refits) with E free, as a raw dict {E, alpha, beta, (A, p),
    (B, p)}; or :func:`fit_fixed_e`."""
    if e is not None:
        return fit_fixed_e(n, d, p, y, form, e)
    law = fit_joint_chinchilla(_points(n, d, p, y), uncertainty=None, backtest=False, form=form)
    out: dict = {}
    for key, v in law.params.items():
        name, _, rest = key.partition("[")
        inner = rest.rstrip("]").split(",")
        if len(inner) == 1:
            out[name] = float(v)
        elif name in ("A", "B"):
            out[(name, float(inner[1].split("=")[1]))] = float(v)
    return out


def as_law(raw: dict, form: str, pair: str) -> JointChinchillaFit:
    """A raw fit as the package's law object (its predict interpolates unfitted weights)."""
    params = {}
    for key, v in raw.items():
        params[f"{key[0]}[{pair},p={key[1]:g}]" if isinstance(key, tuple) else f"{key}[{pair}]"] = v
    ws = sorted(k[1] for k in raw if isinstance(k, tuple) and k[0] == "A")
    return JointChinchillaFit(law="chinchilla_joint", params=params, pairs=[pair],
                              weights={pair: ws}, meta={"form": {pair: form}})


def predict(raw: dict, form: str, n, d, p) -> float:
    return float(np.ravel(as_law(raw, form, "x").predict(n, d, p, "x"))[0])


def n_effective(raw: dict, form: str, h: dict) -> float:
    """N at which the law reaches the held-out run's measured loss at its D and weight (inf
    when the measured loss lies below the law's N → ∞ limit at that D, nan above the smallest
    N tried)."""
    def gap(ln_n):
        return predict(raw, form, math.exp(ln_n), h["d"], h["p"]) - h["y"]
    lo, hi = math.log(h["n"] / 1e3), math.log(h["n"] * 1e4)
    if gap(hi) > 0:
        return math.inf
    if gap(lo) < 0:
        return math.nan
    return math.exp(brentq(gap, lo, hi, xtol=1e-6))


def _rel(pred: float, y: float) -> float:
    return pred / y - 1.0


def analyse_pair(pr: dict, truth: float | None) -> dict:
    """Experiments 1–5 of the module docstring on one pair of one study."""
    n, d, p, y, h = pr["n"], pr["d"], pr["p"], pr["y"], pr["held"]
    form, k = pr["form"], pr["budgets"]
    rank = budget_rank(d, p, n)
    keep = rank < k
    big = n == n.max()
    res: dict = {"form": form, "budgets": k, "measured": h["y"], "held_sd_rel":
                 None if h["sd"] is None else h["sd"] / h["y"], "truth": truth}
    # 1. E free / fixed, chosen form and the other one
    fixes = {"free": None} if truth is None else {"free": None, "fixed": truth}
    exp1 = {}
    for f_ in (form, _OTHER[form]):
        for tag, e in fixes.items():
            raw = fit(n[keep], d[keep], p[keep], y[keep], f_, e)
            bt_raw = fit(n[keep & ~big], d[keep & ~big], p[keep & ~big], y[keep & ~big], f_, e)
            tgt = keep & big
            errs = np.array([_rel(predict(bt_raw, f_, a, b, c), t) for a, b, c, t in
                             zip(n[tgt], d[tgt], p[tgt], y[tgt], strict=True)])
            exp1[f"{f_}/{tag}"] = {
                "E": raw["E"], "alpha": raw["alpha"], "beta": raw["beta"],
                "heldout_err": _rel(predict(raw, f_, h["n"], h["d"], h["p"]), h["y"]),
                "limit_N_inf": predict_limit(raw, f_, h), "raw": raw,
                "backtest_rmse": float(np.sqrt(np.mean(errs ** 2))),
                "backtest_mean": float(np.mean(errs)), "backtest_E": bt_raw["E"],
                "backtest_by_p": {f"{w:g}": float(np.mean(errs[p[tgt] == w]))
                                  for w in np.unique(p[tgt])}}
    res["E"] = exp1
    # 1c. profile in E: the fit's own residuals and the held-out error with E fixed at
    # fractions of the exact L∞ (how well do the fitted points pin E?)
    if truth is not None:
        prof = {}
        for f_ in (form, _OTHER[form]):
            for frac in PROFILE:
                e = frac * truth
                if e >= y[keep].min():
                    continue
                raw = fit(n[keep], d[keep], p[keep], y[keep], f_, e)
                fit_res = np.array([_rel(predict(raw, f_, a, b, c), t) for a, b, c, t in
                                    zip(n[keep], d[keep], p[keep], y[keep], strict=True)])
                prof[f"{f_}/{frac:g}"] = {
                    "fit_rmse": float(np.sqrt(np.mean(fit_res ** 2))),
                    "heldout_err": _rel(predict(raw, f_, h["n"], h["d"], h["p"]), h["y"])}
        res["E_profile"] = prof
    # 2. effective N, local exponents of the excess over the exact L∞
    res["n_eff"] = {f"{f_}/{tag}": n_effective(exp1[f"{f_}/{tag}"]["raw"], f_, h) / h["n"]
                    for f_ in (form, _OTHER[form]) for tag in fixes}
    if truth is not None:
        last = rank == 0
        sizes = np.unique(n)
        ws = np.unique(p)
        ex = {w: np.array([y[last & (n == s) & (p == w)].mean() / truth - 1 for s in sizes])
              for w in ws}
        slopes = {}
        for i in range(sizes.size - 1):
            r = np.log(sizes[i + 1] / sizes[i])
            slopes[f"{sizes[i]:.0f}->{sizes[i + 1]:.0f}"] = float(np.mean(
                [-np.log(ex[w][i + 1] / ex[w][i]) / r for w in ws]))
        lo_w, hi_w = max(w for w in ws if w <= h["p"]), min(w for w in ws if w >= h["p"])
        t = 0.0 if hi_w == lo_w else (h["p"] - lo_w) / (hi_w - lo_w)
        top = math.exp((1 - t) * math.log(ex[lo_w][-1]) + t * math.log(ex[hi_w][-1]))
        slopes[f"{sizes[-1]:.0f}->held {h['n']:.0f}"] = float(
            -math.log((h["y"] / truth - 1) / top) / math.log(h["n"] / sizes[-1]))
        res["excess_slopes"] = slopes
        res["excess_top"] = top
        res["excess_held"] = h["y"] / truth - 1
    # 3. branches only (rank ≥ 1) → each run's own end (rank 0) and the held-out run
    br = rank >= 1
    exp3 = {}
    for tag, e in fixes.items():
        raw = fit(n[br], d[br], p[br], y[br], form, e)
        ends = rank == 0
        errs = np.array([_rel(predict(raw, form, a, b, c), t) for a, b, c, t in
                         zip(n[ends], d[ends], p[ends], y[ends], strict=True)])
        exp3[tag] = {"E": raw["E"], "ends_mean": float(np.mean(errs)),
                     "ends_rmse": float(np.sqrt(np.mean(errs ** 2))),
                     "ends_largest": float(np.mean(errs[n[ends] == n.max()])),
                     "heldout_err": _rel(predict(raw, form, h["n"], h["d"], h["p"]), h["y"])}
    res["D"] = exp3
    # 4. the held-out weight: the coefficients of the fitted weights around it
    raw = exp1[f"{form}/free"]["raw"]
    ws = sorted(k_[1] for k_ in raw if isinstance(k_, tuple) and k_[0] == "A")
    around = [w for w in ws if w < h["p"]][-1:] + [w for w in ws if w > h["p"]][:1]
    res["p"] = {f"{w:g}": _rel(predict(raw, form, h["n"], h["d"], w), h["y"]) for w in around}
    res["p"][f"{h['p']:g} (interpolated)"] = exp1[f"{form}/free"]["heldout_err"]
    for v in exp1.values():
        v.pop("raw")
    return res


def predict_limit(raw: dict, form: str, h: dict) -> float:
    """The law's N → ∞ limit at the held-out run's D and weight (the data term plus E)."""
    return predict(raw, form, h["n"] * 1e9, h["d"], h["p"])


def _pct(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–" if x is None or math.isnan(x) else "∞"
    return f"{100 * x:+.1f} %"


def print_tables(results: dict) -> None:
    print("\n## 1. E fixed at the exact L∞ (chosen form / other form)\n")
    print("| study | pair | form, budgets | E free / true − 1 | held-out: E free | E fixed | "
          "other form E free | E fixed | backtest rmse (mean): E free | E fixed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            f_, o = r["form"], _OTHER[r["form"]]
            e = r["E"]
            fx = f"{f_}/fixed" in e
            print(f"| {name} | {pair} | {f_}, last {r['budgets']} | "
                  f"{_pct(e[f'{f_}/free']['E'] / r['truth'] - 1) if r['truth'] else '–'} | "
                  f"{_pct(e[f'{f_}/free']['heldout_err'])} | "
                  f"{_pct(e[f'{f_}/fixed']['heldout_err']) if fx else '–'} | "
                  f"{_pct(e[f'{o}/free']['heldout_err'])} | "
                  f"{_pct(e[f'{o}/fixed']['heldout_err']) if fx else '–'} | "
                  f"{100 * e[f'{f_}/free']['backtest_rmse']:.1f} ({_pct(e[f'{f_}/free']['backtest_mean'])}) | "
                  + (f"{100 * e[f'{f_}/fixed']['backtest_rmse']:.1f} "
                     f"({_pct(e[f'{f_}/fixed']['backtest_mean'])}) |" if fx else "– |"))
    print("\n## 1b. The law's N → ∞ limit at the held-out run's D and weight, over the exact L∞ "
          "(E + the data term; the held-out run measured for comparison)\n")
    print("| study | pair | measured L/L∞ − 1 | chosen form E free | E fixed | other form E free | "
          "E fixed |")
    print("|---|---|---|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            if not r["truth"]:
                continue
            e = r["E"]
            cells = " | ".join(_pct(e[f"{f_}/{tag}"]["limit_N_inf"] / r["truth"] - 1)
                               for f_ in (r["form"], _OTHER[r["form"]])
                               for tag in ("free", "fixed"))
            print(f"| {name} | {pair} | {_pct(r['measured'] / r['truth'] - 1)} | {cells} |")
    print("\n## 1c. E fixed at fractions of the exact L∞: the fit's RMSE / the held-out error\n")
    print("| study | pair | form | " + " | ".join(f"E = {f:g} L∞" for f in PROFILE) + " |")
    print("|---|---|---|" + "---|" * len(PROFILE))
    for name, pairs in results.items():
        for pair, r in pairs.items():
            prof = r.get("E_profile") or {}
            for f_ in (r["form"], _OTHER[r["form"]]):
                cells = []
                for frac in PROFILE:
                    c = prof.get(f"{f_}/{frac:g}")
                    cells.append("–" if c is None else
                                 f"{100 * c['fit_rmse']:.1f} / {_pct(c['heldout_err'])}")
                print(f"| {name} | {pair} | {f_} | " + " | ".join(cells) + " |")
    print("\n## 2. Effective N of the held-out run, and the excess over L∞ along the ladder\n")
    print("| study | pair | N_eff/N: chosen form E free | E fixed | other form E free | "
          "E fixed | excess L/L∞−1: largest fitted (at p) | "
          "held-out | local exponent of the excess, consecutive sizes → held-out |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            ne = r["n_eff"]
            sl = r.get("excess_slopes") or {}
            cells = " | ".join(f"{ne[f'{f_}/{tag}']:.2f}" if f"{f_}/{tag}" in ne else "–"
                               for f_ in (r["form"], _OTHER[r["form"]])
                               for tag in ("free", "fixed"))
            print(f"| {name} | {pair} | {cells} | "
                  f"{_pct(r.get('excess_top'))} | {_pct(r.get('excess_held'))} | "
                  + ", ".join(f"{v:.2f}" for v in sl.values()) + " |")
    print("\n## 3. Branches only (45/60/75 %) → each run's own end and the held-out run\n")
    print("| study | pair | E free: E/true−1 | ends mean (largest size) | held-out | "
          "E fixed: ends mean (largest size) | held-out |")
    print("|---|---|---|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            a, b = r["D"]["free"], r["D"].get("fixed")
            print(f"| {name} | {pair} | "
                  f"{_pct(a['E'] / r['truth'] - 1) if r['truth'] else '–'} | "
                  f"{_pct(a['ends_mean'])} ({_pct(a['ends_largest'])}) | "
                  f"{_pct(a['heldout_err'])} | "
                  + (f"{_pct(b['ends_mean'])} ({_pct(b['ends_largest'])}) | "
                     f"{_pct(b['heldout_err'])} |" if b else "– | – |"))
    print("\n## 4. The held-out weight: coefficients of the fitted weights around it (E free)\n")
    print("| study | pair | held-out error at each weight's coefficients | backtest mean "
          "error per weight (E free) |")
    print("|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            f_ = r["form"]
            print(f"| {name} | {pair} | "
                  + ", ".join(f"p {w}: {_pct(v)}" for w, v in r["p"].items()) + " | "
                  + ", ".join(f"{w}: {_pct(v)}" for w, v in
                              r["E"][f"{f_}/free"]["backtest_by_p"].items()) + " |")
    print("\n## 5. The fits side by side (chosen form, E free)\n")
    print("| study | pair | E/true−1 | α | β | selection RMSE in N | in D | held-out |")
    print("|---|---|---|---|---|---|---|---|")
    for name, pairs in results.items():
        for pair, r in pairs.items():
            e = r["E"][f"{r['form']}/free"]
            c = r["selection"]
            print(f"| {name} | {pair} | "
                  f"{_pct(e['E'] / r['truth'] - 1) if r['truth'] else '–'} | "
                  f"{e['alpha']:.2f} | {e['beta']:.2f} | {100 * (c['rmse_n'] or 0):.1f} % | "
                  f"{100 * c['rmse_d']:.1f} % | {_pct(e['heldout_err'])} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory holding seed<K>/ study outputs")
    ap.add_argument("--seeds", type=int, nargs="*", default=[])
    ap.add_argument("--study", nargs="*", default=[], help="more study output directories")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    a = ap.parse_args(argv)
    dirs = {f"seed {s}": os.path.join(a.out, f"seed{s}") for s in a.seeds}
    dirs.update({os.path.basename(os.path.normpath(s)): s for s in a.study})
    results: dict = {}
    for name, path in dirs.items():
        st = load_study(path)
        results[name] = {}
        for pair, pr in st["pairs"].items():
            r = analyse_pair(pr, st["truth"].get(pair))
            # the chosen candidate's scores, for table 5
            sel = pr["selection"]
            r["selection"] = sel["candidates"][sel["chosen"]]
            r["E_shipped"] = pr["E_shipped"]
            results[name][pair] = r
        print(f"{name}: done", file=sys.stderr)
    print_tables(results)
    if a.json:
        print(json.dumps(results, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
