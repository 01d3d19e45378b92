"""Speed: the joint law (Fernandes eq. 7) for 2 pairs × 9 weights × 8 sizes with 100
perturbation refits must take under 5 s.

Measured in the same run for comparison: a direct fit of the same law without variable
projection (scipy ``least_squares`` with soft_l1 over all 10 parameters per pair, the same 30
α starts with β, L∞ initialised by a crude guess, f_scale fixed to the value our fit chose),
also with 100 perturbation refits; its wall time and its L∞ error are printed next to ours.
Wall time and process CPU time are both reported: on a shared machine (see the load average)
the CPU time is the load-independent number.

Usage (from the repository root):
    python benchmarks/fit_speed.py [--repeats 3] [--json]
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
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a clone without installing the package

from fitting.laws.joint import fit_joint_law  # noqa: E402
from fitting.laws.power import ALPHA_GRID  # noqa: E402
from fitting.test_utils import TRUTH, make_final_table  # noqa: E402


def direct_fit(df, f_scale: float, n_refits: int, seed: int) -> dict[str, float]:
    """Baseline: eq. 7 per pair by plain multi-start least_squares (no variable projection)."""
    rng = np.random.default_rng(seed)
    out = {}
    for pair, sub in df[df.weight > 0].groupby("pair"):
        n = sub.n.to_numpy(float)
        p = sub.weight.to_numpy(float)
        y = sub.value.to_numpy(float)
        ws = np.unique(p)
        onehot = (p[:, None] == ws[None, :]).astype(float)

        def resid(x, yy, n=n, onehot=onehot):
            return onehot @ x[1:-1] * n ** -x[0] + x[-1] - yy

        def fit(yy, starts, n=n, ws=ws):
            best = None
            for a0 in starts:
                b0 = np.full(ws.size, (yy.max() - 0.9 * yy.min()) * n.min() ** a0)
                x0 = np.concatenate([[a0], b0, [0.9 * yy.min()]])
                lo = np.concatenate([[1e-4], np.zeros(ws.size), [0.0]])
                hi = np.concatenate([[5.0], np.full(ws.size, np.inf), [np.inf]])
                s = least_squares(resid, x0, args=(yy,), bounds=(lo, hi), loss="soft_l1",
                                  f_scale=f_scale, max_nfev=2000)
                if best is None or s.cost < best.cost:
                    best = s
            return best.x

        x = fit(y, ALPHA_GRID)
        for _ in range(n_refits):
            fit(y * (1 + 0.01 * rng.standard_normal(y.size)), [x[0]])
        out[pair] = float(x[-1])
    return out


def run(repeats: int, n_refits: int) -> dict:
    df = make_final_table(noise=0.01, seed=0)
    assert df.weight.nunique() == 9 and df.n.nunique() == 8 and df.pair.nunique() == 2
    ours, ours_cpu, base = [], [], []
    fit = None
    for r in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fit = fit_joint_law(df, n_refits=n_refits, seed=r)
        ours.append(time.perf_counter() - t)
        ours_cpu.append(time.process_time() - c)
    fs = float(np.median(list(fit.meta["f_scale"].values())))
    t, c = time.perf_counter(), time.process_time()
    linf_base = direct_fit(df, fs, n_refits, 0)
    base.append(time.perf_counter() - t)
    base_cpu = time.process_time() - c
    err_ours = {p: abs(fit.params[f"l_inf[{p}]"] / TRUTH[p][2] - 1) for p in TRUTH}
    err_base = {p: abs(linf_base[p] / TRUTH[p][2] - 1) for p in TRUTH}
    return {
        "setting": "2 pairs × 9 weights × 8 sizes, 1% noise, soft_l1 + f_scale grid, "
                   f"{n_refits} perturbation refits",
        "ours_seconds": ours, "ours_best": min(ours), "ours_cpu_seconds": ours_cpu,
        "target_seconds": 5.0, "meets_target": min(ours) < 5.0,
        "meets_target_cpu": min(ours_cpu) < 5.0,
        "direct_least_squares_seconds": base[0], "direct_cpu_seconds": base_cpu,
        "speedup_vs_direct": base[0] / min(ours),
        "speedup_vs_direct_cpu": base_cpu / min(ours_cpu),
        "l_inf_rel_err_ours": err_ours, "l_inf_rel_err_direct": err_base,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpu",
        "python": platform.python_version(), "loadavg": list(os.getloadavg()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-refits", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.repeats, a.n_refits)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(res["setting"])
    print(f"ours (varpro engine): wall best {res['ours_best']:.2f} s of "
          f"{[round(x, 2) for x in res['ours_seconds']]}, CPU "
          f"{[round(x, 2) for x in res['ours_cpu_seconds']]} s  (target < 5 s: wall "
          f"{'met' if res['meets_target'] else 'NOT met'}, CPU "
          f"{'met' if res['meets_target_cpu'] else 'NOT met'})")
    print(f"direct least_squares baseline: wall {res['direct_least_squares_seconds']:.2f} s, CPU "
          f"{res['direct_cpu_seconds']:.2f} s (ours is {res['speedup_vs_direct']:.1f}× faster "
          f"wall, {res['speedup_vs_direct_cpu']:.1f}× CPU)")
    print(f"L∞ relative error: ours {res['l_inf_rel_err_ours']}, direct {res['l_inf_rel_err_direct']}")
    print(f"machine: {res['machine']}, python {res['python']}, load average {res['loadavg']}")


if __name__ == "__main__":
    main()
