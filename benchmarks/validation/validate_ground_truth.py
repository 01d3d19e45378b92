"""Validation 1: every law recovers known parameters from data with 1% noise.

For each law, data are generated from fixed parameters, every value multiplied by (1 + 0.01·ε),
ε ~ N(0, 1), and refitted, over several seeds. Reported per parameter: the median and the worst
relative error over seeds (absolute error for the fractions f(p), f̂(p) ∈ [0, 1]), the stated tolerance (on the median), and the coverage of the 95%
perturbation interval (fraction of seeds whose interval contains the truth). For the eq. 11 law
the predicted 2-pair frontier at N = 4× the largest fitted size is compared with the true one.

Usage (from the repository root):
    python benchmarks/validation/validate_ground_truth.py [--seeds 10] [--n-refits 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from fitting.core.options import UncertaintyOptions
from fitting.laws.curves.learning_curve import fit_learning_curve  # noqa: E402
from fitting.laws.quality import fit_quality_law  # noqa: E402
from fitting.laws.size.bivariate import fit_bivariate_law  # noqa: E402
from fitting.laws.size.effective import fit_multilingual_law  # noqa: E402
from fitting.laws.size.joint import fit_joint_law  # noqa: E402
from fitting.laws.size.power import fit_power_law  # noqa: E402
from fitting.test_utils import TRUTH, f_hat, make_final_table, true_loss  # noqa: E402

# Stated tolerances on the median relative error over seeds (docs/guides/validation.md).
TOL = {
    "power": {"alpha": 0.15, "beta": 0.60, "l_inf": 0.03},
    "joint": {"alpha": 0.05, "l_inf": 0.02, "beta_1": 0.25, "f(p)": 0.15},
    "multilingual": {"alpha": 0.05, "l_inf": 0.02, "beta1": 0.25, "f_hat(p)": 0.10,
                     "frontier_4x": 0.01},
    "bivariate": {"alpha": 0.15, "p_e": 0.10, "p_d": 0.10, "l_inf": 0.03},
    "quality_power": {"c": 0.02, "p": 0.02},
    "quality_linear": {"a": 0.02, "b": 0.03},
    "learning_curve": {"alpha": 0.10, "l_inf": 0.05},
}


def _rel(a: float, b: float) -> float:
    return abs(a / b - 1.0)


def _cover(fit, name: str, truth: float) -> bool | None:
    if not fit.intervals or name not in fit.intervals:
        return None
    lo, hi = fit.intervals[name]
    return bool(lo <= truth <= hi)


def power_case(seed: int, n_refits: int) -> dict:
    true = {"alpha": 0.35, "beta": 40.0, "l_inf": 1.2}
    n = np.geomspace(1e5, 5e7, 8)
    y = true["beta"] * n ** -true["alpha"] + true["l_inf"]
    y = y * (1 + 0.01 * np.random.default_rng(seed).standard_normal(y.size))
    f = fit_power_law(n, y, uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    return {k: (_rel(f[k], v), _cover(f, k, v)) for k, v in true.items()}


def joint_case(seed: int, n_refits: int) -> dict:
    f = fit_joint_law(make_final_table(noise=0.01, seed=seed),
                      uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    out = {}
    for k in ("alpha", "l_inf"):
        idx = {"alpha": 0, "l_inf": 2}[k]
        errs = [_rel(f.params[f"{k}[{p}]"], TRUTH[p][idx]) for p in TRUTH]
        covs = [_cover(f, f"{k}[{p}]", TRUTH[p][idx]) for p in TRUTH]
        out[k] = (max(errs), all(covs))
    out["beta_1"] = (max(_rel(f.params[f"beta[{p},p=1]"], TRUTH[p][1]) for p in TRUTH),
                     all(_cover(f, f"beta[{p},p=1]", TRUTH[p][1]) for p in TRUTH))
    ps = np.array([0.05, 0.1, 0.3, 0.5, 0.7, 0.9])
    # f(p) ∈ [0, 1]: absolute error (a relative one is amplified 1/α-fold at small p)
    out["f(p)"] = (max(float(np.max(np.abs(f.fraction(ps, p) - f_hat(ps, *TRUTH[p][3]))))
                       for p in TRUTH), None)
    return out


def multilingual_case(seed: int, n_refits: int) -> dict:
    f = fit_multilingual_law(make_final_table(noise=0.01, seed=seed),
                             uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    out = {}
    for k, idx in (("alpha", 0), ("beta1", 1), ("l_inf", 2)):
        out[k] = (max(_rel(f.params[f"{k}[{p}]"], TRUTH[p][idx]) for p in TRUTH),
                  all(_cover(f, f"{k}[{p}]", TRUTH[p][idx]) for p in TRUTH))
    ps = np.linspace(0.05, 1.0, 20)
    out["f_hat(p)"] = (max(float(np.max(np.abs(f.f_hat(ps, p) - f_hat(ps, *TRUTH[p][3]))))
                           for p in TRUTH), None)
    # frontier at 4× the largest fitted size (2e7): pair 1 gets p, pair 2 gets 1 − p
    n4, p = 4 * 2e7, np.linspace(0.02, 0.98, 49)
    err = max(float(np.max(np.abs(f.predict(n4, p, "en-de") / true_loss("en-de", n4, p) - 1))),
              float(np.max(np.abs(f.predict(n4, 1 - p, "en-zh")
                                  / true_loss("en-zh", n4, 1 - p) - 1))))
    lo, hi = f.band([n4] * p.size, p, "en-de")
    out["frontier_4x"] = (err, bool(np.all((lo <= true_loss("en-de", n4, p) * 1.0 + 1e-12)
                                           & (true_loss("en-de", n4, p) <= hi + 1e-12))))
    return out


def bivariate_case(seed: int, n_refits: int) -> dict:
    ne = np.array([20, 40, 80, 160, 320, 20, 20, 20, 20, 40, 80, 160]) * 1e6
    nd = np.array([25, 25, 25, 25, 25, 50, 100, 200, 400, 50, 100, 200]) * 1e6
    true = {"alpha": 0.8, "p_e": 0.25, "p_d": 0.35, "l_inf": 0.9}
    y = true["alpha"] * (120e6 / ne) ** 0.25 * (150e6 / nd) ** 0.35 + 0.9
    y = y * (1 + 0.01 * np.random.default_rng(seed).standard_normal(y.size))
    f = fit_bivariate_law(ne, nd, y, n_e_bar=120e6, n_d_bar=150e6,
                          uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    return {k: (_rel(f[k], v), _cover(f, k, v)) for k, v in true.items()}


def quality_cases(seed: int, n_refits: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    L = np.linspace(1.2, 2.5, 15)
    b = 40 * L**-1.5 * (1 + 0.01 * rng.standard_normal(L.size))
    q = fit_quality_law(L, b, uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    c = (70 - 12 * L) * (1 + 0.01 * rng.standard_normal(L.size))
    lin = fit_quality_law(L, c, form="linear", metric="chrf",
                          uncertainty=UncertaintyOptions(n_refits=n_refits, seed=seed))
    return ({"c": (_rel(q["c"], 40), _cover(q, "c", 40)), "p": (_rel(q["p"], 1.5),
                                                                 _cover(q, "p", 1.5))},
            {"a": (_rel(lin["a"], 70), _cover(lin, "a", 70)),
             "b": (_rel(lin["b"], -12), _cover(lin, "b", -12))})


def learning_curve_case(seed: int, n_refits: int) -> dict:
    s = np.geomspace(1000, 100000, 30)
    y = 3.0 * (s / 1000) ** -0.5 + 0.8
    y = y * (1 + 0.01 * np.random.default_rng(seed).standard_normal(s.size))
    f = fit_learning_curve(s, y, min_step_fraction=0.0,
                           uncertainty=UncertaintyOptions(method="perturbation",
                                                          n_refits=n_refits, seed=seed))
    return {"alpha": (_rel(f["alpha"], 0.5), _cover(f, "alpha", 0.5)),
            "l_inf": (_rel(f["l_inf"], 0.8), _cover(f, "l_inf", 0.8))}


def run(seeds: int, n_refits: int) -> dict:
    per_law: dict[str, list[dict]] = {k: [] for k in TOL}
    t0 = time.perf_counter()
    for seed in range(seeds):
        per_law["power"].append(power_case(seed, n_refits))
        per_law["joint"].append(joint_case(seed, n_refits))
        per_law["multilingual"].append(multilingual_case(seed, n_refits))
        per_law["bivariate"].append(bivariate_case(seed, n_refits))
        qp, ql = quality_cases(seed, n_refits)
        per_law["quality_power"].append(qp)
        per_law["quality_linear"].append(ql)
        per_law["learning_curve"].append(learning_curve_case(seed, n_refits))
    out: dict = {"seeds": seeds, "n_refits": n_refits, "noise": 0.01, "laws": {}}
    all_ok = True
    for law, runs in per_law.items():
        res = {}
        for name, tol in TOL[law].items():
            errs = np.array([r[name][0] for r in runs])
            cov = [r[name][1] for r in runs if r[name][1] is not None]
            ok = bool(np.median(errs) <= tol)
            all_ok &= ok
            res[name] = {"median_rel_err": float(np.median(errs)), "max_rel_err": float(errs.max()),
                         "tolerance": tol, "pass": ok,
                         "coverage_95": (float(np.mean(cov)) if cov else None)}
        out["laws"][law] = res
    out["all_pass"] = all_ok
    out["seconds"] = time.perf_counter() - t0
    out["machine"] = f"{platform.machine()} {os.cpu_count()} cpu"
    out["loadavg"] = list(os.getloadavg())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--n-refits", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.seeds, a.n_refits)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"1% noise, {res['seeds']} seeds, {res['n_refits']} perturbation refits per fit")
    print(f"{'law':15s} {'parameter':12s} {'median':>8s} {'worst':>8s} {'tol':>6s} "
          f"{'cover95':>7s} pass")
    for law, r in res["laws"].items():
        for name, s in r.items():
            cov = "-" if s["coverage_95"] is None else f"{s['coverage_95']:.2f}"
            print(f"{law:15s} {name:12s} {100 * s['median_rel_err']:7.2f}% "
                  f"{100 * s['max_rel_err']:7.2f}% {100 * s['tolerance']:5.1f}% {cov:>7s} "
                  f"{'ok' if s['pass'] else 'FAIL'}")
    print(f"all within tolerance: {res['all_pass']}; {res['seconds']:.1f} s; {res['machine']}; "
          f"load average {res['loadavg']}")


if __name__ == "__main__":
    main()
