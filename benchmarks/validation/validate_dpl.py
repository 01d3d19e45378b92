"""Validate `fitting.laws.mixture.dpl` and `fitting.data.sampling` (validation 6).

* Chen et al. 2023 eq. 6 preset: the low-resource curve (D = 0.26M) is U-shaped, the
  high-resource one (D = 10M) monotone; critical ratios.
* Optimal sampling ratios (eq. 7) for Chen's 2-direction (De 4.6M, Hi 0.26M; uniform r and
  r_Hi = 1) and 4-direction (Fr 10M, De 4.6M, Zh 0.26M, Hi 0.26M; uniform r) settings, next to the
  temperature weights T ∈ {1, 2, 5, 10, 100} and the eq. 7 objective each achieves (reducible
  part; the biases M_∞ do not change the optimum). Chen's measured average cross-entropies
  (Table 2) are printed alongside for reference.
* Ground truth: data generated from eq. 6 (19 ratios × 4 data sizes) with 1% noise, refitted
  by the three-step estimation + joint polish; curve, critical-ratio and optimal-ratio errors.

Usage (from the repository root):
    python benchmarks/validation/validate_dpl.py [--json] [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import machine  # noqa: E402
from fitting.data.sampling import temperature_weights  # noqa: E402
from fitting.laws.mixture.dpl import (  # noqa
    CHEN_EQ6_PRESET,
    dpl_objective,
    fit_dpl,
    optimal_sampling_ratios,
)

TEMPS = [1, 2, 5, 10, 100]
SETTINGS = {
    "2-direction, uniform r": (["De", "Hi"], [4.6e6, 0.26e6], None),
    "2-direction, r_Hi = 1": (["De", "Hi"], [4.6e6, 0.26e6], [0.0, 1.0]),
    "4-direction, uniform r": (["Fr", "De", "Zh", "Hi"], [10e6, 4.6e6, 0.26e6, 0.26e6], None),
}
# Chen et al. 2023 Table 2: measured cross-entropy (average over directions, or Hi for r_Hi=1).
CHEN_TABLE2 = {
    "2-direction, uniform r": {"T=1": 2.31, "T=2": 2.00, "T=5": 2.03, "T=10": 2.10,
                               "T=100": 2.19, "DPL": 1.99},
    "2-direction, r_Hi = 1": {"T=1": 3.20, "T=2": 2.56, "T=5": 2.51, "T=10": 2.59,
                              "T=100": 2.69, "DPL": 2.45},
    "4-direction, uniform r": {"T=1": 2.77, "T=2": 2.43, "T=5": 2.42, "T=10": 2.43,
                               "T=100": 2.48, "DPL": 2.41},
}


def preset_shapes() -> dict:
    law = CHEN_EQ6_PRESET
    p = np.linspace(0.05, 1.0, 96)
    out = {}
    for size in (0.26e6, 1e6, 4.6e6, 10e6):
        f = law.predict(p, size)
        i = int(np.argmin(f))
        out[f"{size / 1e6:g}M"] = {
            "u_shaped": bool(law.is_u_shaped(size)),
            "critical_ratio": float(law.critical_ratio(size)),
            "monotone_decreasing_on_grid": bool(np.all(np.diff(f) < 0)),
            "argmin_on_grid": float(p[i]),
            "G(D)": float(law.overfit_scale(size)),
            "F(0.1), F(0.5), F(0.9)": [float(law.predict(v, size)) for v in (0.1, 0.5, 0.9)],
        }
    return out


def ratios() -> dict:
    out = {}
    for name, (dirs, sizes, r) in SETTINGS.items():
        t = time.perf_counter()
        p = optimal_sampling_ratios(sizes, r)
        wall = time.perf_counter() - t
        row = {"directions": dirs, "sizes": sizes, "preferences": r or "uniform",
               "DPL": {"ratios": p.tolist(), "objective": dpl_objective(p, sizes, r)},
               "solve_s": wall}
        for T in TEMPS:
            w = temperature_weights(sizes, T)
            row[f"T={T}"] = {"ratios": w.tolist(), "objective": dpl_objective(w, sizes, r)}
        row["chen_table2_measured_ce"] = CHEN_TABLE2[name]
        out[name] = row
    return out


def ground_truth(seeds: int = 10) -> dict:
    ps = np.arange(0.05, 0.951, 0.05)
    groups = [(10e6, 1.5), (0.26e6, 3.0), (1e6, 2.5), (4.6e6, 2.0)]
    p = np.concatenate([ps] * len(groups))
    d = np.concatenate([np.full(ps.size, s) for s, _ in groups])
    y0 = np.concatenate([CHEN_EQ6_PRESET.predict(ps, s, bias=m) for s, m in groups])
    rng = np.random.default_rng(0)
    res = {"curve_max_rel_err": [], "critical_ratio_err": [], "ratio_max_abs_err": [],
           "params": [], "wall_s": []}
    for _ in range(seeds):
        y = y0 * (1 + 0.01 * rng.standard_normal(y0.size))
        t = time.perf_counter()
        fit = fit_dpl(p, d, y)
        res["wall_s"].append(time.perf_counter() - t)
        res["params"].append(fit.params)
        res["curve_max_rel_err"].append(max(
            float(np.max(np.abs(fit.predict(ps, s, group=f"{s:g}")
                                / CHEN_EQ6_PRESET.predict(ps, s, bias=m) - 1)))
            for s, m in groups))
        res["critical_ratio_err"].append(
            abs(fit.critical_ratio(0.26e6) - CHEN_EQ6_PRESET.critical_ratio(0.26e6)))
        res["ratio_max_abs_err"].append(max(
            float(np.max(np.abs(optimal_sampling_ratios(s, r, law=fit)
                                - optimal_sampling_ratios(s, r))))
            for _, s, r in SETTINGS.values()))
    exact = fit_dpl(p, d, y0)
    summary = {k: float(np.max(v)) for k, v in res.items() if k not in ("params", "wall_s")}
    summary["mean_fit_s"] = float(np.mean(res["wall_s"]))
    summary["noise_free_params"] = exact.params
    summary["seeds"] = seeds
    return summary


def plot(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = np.linspace(0.02, 1.0, 200)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for size in (0.26e6, 1e6, 4.6e6, 10e6):
        ax.plot(p, CHEN_EQ6_PRESET.predict(p, size), label=f"D = {size / 1e6:g}M")
    ax.set_xlabel("sampling ratio p")
    ax.set_ylabel("F(p, D) − M∞")
    ax.set_title("Chen et al. 2023 eq. 6 (base model)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--plot", type=Path, help="write the eq. 6 curves to this PNG")
    args = ap.parse_args(argv)
    report = {
        "machine": machine({"platform": "platform", "cpus": "cpu_count", "load_avg": "loadavg"}),
        "worked_example_T5": temperature_weights([10e6, 4.6e6, 0.26e6, 0.26e6], 5).tolist(),
        "preset": preset_shapes(),
        "ratios": ratios(),
        "ground_truth_1pct_noise": ground_truth(),
    }
    if args.plot:
        plot(args.plot)
        report["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(report))
        return 0
    m = report["machine"]
    print(f"machine: {m['platform']}, {m['cpu_count']} CPUs, load average {m['loadavg']}")
    print("\nworked example, sizes 10M/4.6M/0.26M/0.26M at T=5:",
          " / ".join(f"{v:.3f}" for v in report["worked_example_T5"]))
    print("\nChen eq. 6 preset:")
    for k, v in report["preset"].items():
        print(f"  D={k:5s} U-shaped={v['u_shaped']!s:5s} critical p={v['critical_ratio']:.3f} "
              f"monotone on grid={v['monotone_decreasing_on_grid']!s:5s} G(D)={v['G(D)']:+.3f}")
    for name, row in report["ratios"].items():
        print(f"\n{name}: {', '.join(f'{a} {s / 1e6:g}M' for a, s in zip(row['directions'], row['sizes'], strict=True))}")
        print(f"  {'method':8s} {'ratios':36s} {'eq.7 objective':>15s} {'Chen measured CE':>17s}")
        for meth in ["DPL"] + [f"T={T}" for T in TEMPS]:
            r = row[meth]
            ratios_s = " ".join(f"{v:.3f}" for v in r["ratios"])
            print(f"  {meth:8s} {ratios_s:36s} {r['objective']:15.4f} "
                  f"{row['chen_table2_measured_ce'][meth]:17.2f}")
    g = report["ground_truth_1pct_noise"]
    print(f"\nground truth (eq. 6, 19 ratios x 4 sizes, 1% noise, {g['seeds']} seeds; worst case):"
          f" curve rel. err {g['curve_max_rel_err']:.2%}, critical-ratio err "
          f"{g['critical_ratio_err']:.3f}, optimal-ratio err {g['ratio_max_abs_err']:.3f}; "
          f"mean fit time {g['mean_fit_s'] * 1e3:.0f} ms")
    print("noise-free refit:", {k: round(v, 6) for k, v in g["noise_free_params"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
