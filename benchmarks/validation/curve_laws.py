"""Schedule-aware loss-curve laws on public curves nobody here trained.

Data: ../shared/data/lr_schedule_curves/curves.csv.gz next to the repository (see its README: 235 runs of LLaMA-style
LMs, 33M–360M, cosine and WSD schedules at many cool-down lengths, peak rates and horizons;
Hägele et al. 2024 via Schaipp et al. 2025, MIT). The loss fitted and predicted is the
validation loss (every 200 steps: the training loss of one batch is too noisy for 0.1 %
errors); the schedule is the training rows' learning rate (every 50 steps). A cool-down branch
(``resumed_from_iter``) gets its parent's rates up to the resume step: the constant-rate run of
the same dataset, size and peak rate whose validation loss at the resume step matches the
branch's first one.

Splits (each law: ``lr_annealing``, Tissue et al. 2024 eq. 1; ``multi_power``, Luo et al. 2025):

* ``schedules`` (Luo et al.'s split): 124M, peak 1e-3: fit a constant run (truncated at 25k steps)
  and a cosine run of 25k steps; predict every other schedule of ≤ 25k steps (WSD with cool-downs
  of 10–90 %, linear and sqrt; cosine to 10 %): mean relative error per run.
* ``longer`` (Tissue et al.'s extrapolation): fit three schedules of ≤ 15k steps (constant,
  WSD 20 %, cosine to 10 %); predict the 50k-step runs (3.3×): relative error at the last step.
* ``sizes``: slimpajama runs at peak rate 1e-3 of 33M–152M (constant and its WSD cool-down
  branches up to 93M, cosine at 3 horizons from 124M), L0(N) = E + A_N·N^−a; predict the 208M
  cosine runs. One peak rate: the forward area S1 does not carry over between the peak rates
  chosen per size (fitting the runs at each size's own rates leaves 1.2–1.5 % in-sample).
* ``two_sizes`` (report key ``cross_size_pairs``): the same peak-1e-3 slimpajama runs, sizes
  33M, 53M, 60M, 93M, 124M, 152M, 208M; each consecutive pair of sizes fitted alone (two sizes:
  L0(N) = E + A_N·N^−a under a stated assumption, :mod:`fitting.laws.curves.joint_fit`),
  predicting every run of the next size up. Assumptions: ``a=0.34`` (the exponent fixed at
  Hoffmann et al. 2022's fitted parameter exponent α = 0.34, eq. 10 as usually cited — not
  checked against the paper's text here, and for another data set and tokenizer) and ``E=0``
  (a pure power law L0 = A_N·N^−a). Nothing of the predicted size enters the fit.

Usage (from the repository root):
    nice python benchmarks/validation/curve_laws.py [--json] [--laws lr_annealing,multi_power] [--no-pairs]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import SHARED_DATA, machine  # noqa: E402
from fitting.laws.curves.annealing import fit_annealing_law  # noqa: E402
from fitting.laws.curves.joint_fit import CurveFitOptions, heldout_errors  # noqa: E402
from fitting.laws.curves.multipower import fit_multipower_law  # noqa: E402
from fitting.laws.curves.runs import Curve  # noqa: E402

DATA = SHARED_DATA / "lr_schedule_curves" / "curves.csv.gz"
FITS = {"lr_annealing": fit_annealing_law, "multi_power": fit_multipower_law}


def load(path: Path = DATA) -> tuple[dict[str, Curve], pd.DataFrame]:
    """{run: Curve} (validation loss, training rates; branches spliced) and one row per run."""
    df = pd.read_csv(path)
    info = df.drop_duplicates("run").set_index("run")
    info["bs"] = [r.split("_bs")[1].split("_")[0] for r in info.index]
    tr = df[df["kind"] == "train"].groupby(["run", "iter"], as_index=False)["lr"].mean()
    val = df[df["kind"] == "val"].groupby(["run", "iter"], as_index=False)["loss"].mean()
    rates = {r: g for r, g in tr.groupby("run")}
    losses = {r: g for r, g in val.groupby("run")}
    curves: dict[str, Curve] = {}
    for run in info.index:
        if run not in rates or run not in losses:
            continue
        lr_s, lr = rates[run]["iter"].to_numpy(float), rates[run]["lr"].to_numpy(float)
        b = info.at[run, "resumed_from_iter"]
        if np.isfinite(b):
            parent = _parent(run, info, losses, float(b))
            if parent is None:
                continue
            p = rates[parent]
            keep = p["iter"].to_numpy(float) <= b
            lr_s = np.concatenate([p["iter"].to_numpy(float)[keep], lr_s[lr_s > b]])
            lr = np.concatenate([p["lr"].to_numpy(float)[keep], lr[rates[run]["iter"] > b]])
        v = losses[run]
        curves[run] = Curve(run, lr_s, lr, v["iter"].to_numpy(float), v["loss"].to_numpy(float),
                            float(info.at[run, "params"]))
    return curves, info


def _parent(run: str, info: pd.DataFrame, losses: dict, b: float) -> str | None:
    """The constant-rate run a branch resumed from (module docstring)."""
    me = info.loc[run]
    cand = info[(info["dataset"] == me["dataset"]) & (info["params"] == me["params"])
                & (info["peak_lr"] == me["peak_lr"]) & (info["bs"] == me["bs"])
                & info["resumed_from_iter"].isna() & (info["scheduler"] == "wsd")
                & (info["iterations"] >= b)]
    first = losses[run].sort_values("iter")["loss"].iloc[0]
    best, gap = None, np.inf
    for c in cand.index:
        v = losses.get(c)
        if v is None:
            continue
        at = v[v["iter"] == b]["loss"]
        if len(at) and abs(at.iloc[0] - first) < gap:
            best, gap = c, abs(at.iloc[0] - first)
    return best if gap < 1e-3 else None


def truncated(c: Curve, last: float) -> Curve:
    """The curve up to step ``last`` (a constant-rate run read as a shorter one)."""
    k = c.steps <= last
    return Curve(c.run + f"@{last:g}", c.lr_steps[c.lr_steps <= last], c.lr[c.lr_steps <= last],
                 c.steps[k], c.loss[k], c.n)


#: the anchors' own numbers, as far as they are known here (no paper text in the repository)
ANCHORS = {
    "schedules": {"multi_power": "≈0.1–0.2 % mean, ≈1 % worst (Luo et al. 2025, 25M–400M; as "
                                 "summarised in the project's task — table value not checked "
                                 "here)",
                  "lr_annealing": "≈0.1–0.2 % mean (Tissue et al. 2024; as summarised in the "
                                  "project's task — table value not checked here)"},
    "longer": {"multi_power": "not published (in a form checked here)",
               "lr_annealing": "not published (in a form checked here)"},
    "sizes": {"multi_power": "not published", "lr_annealing": "not published"},
}


def splits(curves: dict[str, Curve], info: pd.DataFrame) -> dict[str, dict]:
    """{split: {"fit": [Curve], "heldout": [run], "metric": …}} (module docstring)."""
    def runs(pred) -> list[str]:
        return sorted(r for r in curves if pred(info.loc[r], r))

    def at124(i) -> bool:
        return i.params == 123587328 and i.peak_lr == 0.001 and i.dataset == "slimpajama"

    const = runs(lambda i, r: at124(i) and r.startswith("stable"))[0]
    cos25 = runs(lambda i, r: at124(i) and r.startswith("cos-zero") and i.iterations == 25000)
    out: dict[str, dict] = {}
    out["schedules"] = {
        "fit": [truncated(curves[const], 25000)] + [curves[r] for r in cos25],
        "heldout": runs(lambda i, r: at124(i) and i.iterations <= 25000 and r not in cos25
                        and r != const),
        "metric": "mean"}
    short = [runs(lambda i, r, p=p, d=d: at124(i) and r.startswith(p) and i.iterations == 15000
                  and i.decay_type == d)[0] for p, d in (("ann124-0.2", "linear"),
                                                         ("cos-10", "sqrt"))]
    out["longer"] = {
        "fit": [truncated(curves[const], 15000)] + [curves[r] for r in short],
        "heldout": runs(lambda i, r: at124(i) and i.iterations == 50000 and r != const),
        "metric": "last"}
    # one peak rate (1e-3) at every size: S1 is not comparable across the peak rates chosen per
    # size (2e-3 for the cosine runs up to 93M, 5e-4 for the constant runs from 124M)
    sl = runs(lambda i, r: i.dataset == "slimpajama" and "bs50x2" in r and i.peak_lr == 0.001
              and r.split("_")[0] in ("sl", "sl53", "sl93", "sl166", "ann0.2"))
    out["sizes"] = {
        "fit": [curves[r] for r in sl if info.at[r, "params"] < 2e8],
        "heldout": [r for r in sl if 2e8 < info.at[r, "params"] < 3e8],
        "metric": "mean", "size_terms": True}
    return out


#: two-size assumptions: name → fit keywords (module docstring)
TWO_SIZE_ASSUMPTIONS = {"a=0.34": {"size_exponent": 0.34}, "E=0": {"fixed_e": 0.0}}


def size_pairs(split: dict, curves: dict[str, Curve]) -> list[dict]:
    """The ``sizes`` split's runs (fitted and held out) by size: each consecutive pair of sizes
    fitted, every run of the next size held out."""
    runs = [c.run for c in split["fit"]] + list(split["heldout"])
    by_size: dict[float, list[str]] = {}
    for r in runs:
        by_size.setdefault(curves[r].n, []).append(r)
    sizes = sorted(by_size)
    return [{"sizes": (sizes[i], sizes[i + 1]), "target": sizes[i + 2],
             "fit": [curves[r] for r in by_size[sizes[i]] + by_size[sizes[i + 1]]],
             "heldout": by_size[sizes[i + 2]], "metric": "mean"}
            for i in range(len(sizes) - 2)]


def cross_size(split: dict, law: str, curves: dict[str, Curve], from_step: float) -> dict:
    """Every consecutive size pair → the next size, under each two-size assumption: per pair the
    held-out runs' mean (and worst) relative error, and their mean over the pairs."""
    out: dict = {}
    for name, kw in TWO_SIZE_ASSUMPTIONS.items():
        rows = []
        for pair in size_pairs(split, curves):
            r = evaluate({**pair, "size_terms": True}, law, curves, from_step, kw)
            rows.append({"fit_sizes_M": [round(n / 1e6) for n in pair["sizes"]],
                         "predict_size_M": round(pair["target"] / 1e6),
                         **{k: r[k] for k in ("n_heldout", "heldout_mean_rel_err",
                                              "heldout_worst_rel_err",
                                              "heldout_last_abs_rel_err_mean",
                                              "fit_mean_rel_err", "fit_seconds", "warnings")},
                         "params": {k: r["params"][k] for k in ("E", "A_N", "a")},
                         "assumption": r["size_assumption"]})
        out[name] = {"pairs": rows,
                     "mean_rel_err_over_pairs": float(np.mean([x["heldout_mean_rel_err"]
                                                               for x in rows]))}
    return out


def evaluate(split: dict, law: str, curves: dict[str, Curve], from_step: float,
             given: dict[str, float] | None = None) -> dict:
    """Fit ``law`` on the split's fitted curves (``given``: the size parameters fixed), predict
    its held-out runs."""
    t0 = time.perf_counter()
    options = CurveFitOptions(from_step=from_step, size_terms=split.get("size_terms", False),
                              **(given or {}))
    fit = FITS[law](split["fit"], options=options)
    secs = time.perf_counter() - t0
    errs = {r: heldout_errors(fit, curves[r]) for r in split["heldout"]}
    means = [e["mean"] for e in errs.values()]
    lasts = [abs(e["last"]) for e in errs.values()]
    return {"fitted_runs": [c.run for c in split["fit"]], "n_heldout": len(errs),
            "params": fit.params, "fit_mean_rel_err": fit.goodness["mean_rel_err"],
            "warnings": fit.warnings, "fit_seconds": round(secs, 2),
            "heldout_mean_rel_err": float(np.mean(means)),
            "heldout_worst_rel_err": float(max(e["worst"] for e in errs.values())),
            "heldout_last_abs_rel_err_mean": float(np.mean(lasts)),
            "heldout_last_abs_rel_err_max": float(np.max(lasts)),
            "per_run": {r: {k: e[k] for k in ("mean", "worst", "last")} for r, e in errs.items()},
            "size_assumption": fit.meta.get("size_terms", {}).get("assumption")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--laws", default="lr_annealing,multi_power")
    ap.add_argument("--from-step", type=float, default=1000.0,
                    help="first step fitted and predicted (default 1000: after the warm-up's "
                         "transient)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-pairs", action="store_true",
                    help="leave out the two-size fits (cross_size_pairs)")
    args = ap.parse_args(argv)
    if not args.data.exists():
        print(f"{args.data}: no such file (the public curves; see the module docstring)",
              file=sys.stderr)
        return 2
    curves, info = load(args.data)
    report: dict = {"machine": machine(), "data": str(args.data), "from_step": args.from_step,
                    "splits": {}}
    all_splits = splits(curves, info)
    for name, split in all_splits.items():
        report["splits"][name] = {law: {**evaluate(split, law, curves, args.from_step),
                                        "anchor": ANCHORS[name][law]}
                                  for law in args.laws.split(",")}
    if not args.no_pairs:
        report["cross_size_pairs"] = {law: cross_size(all_splits["sizes"], law, curves,
                                                      args.from_step)
                                      for law in args.laws.split(",")}
    if args.json:
        print(json.dumps(report, indent=1, default=float))
        return 0
    print(f"{'split':10s} {'law':13s} {'held-out':>8s} {'mean':>8s} {'worst':>8s} "
          f"{'|last|':>8s}  anchor")
    for name, per_law in report["splits"].items():
        for law, r in per_law.items():
            print(f"{name:10s} {law:13s} {r['n_heldout']:8d} {r['heldout_mean_rel_err']:8.2%} "
                  f"{r['heldout_worst_rel_err']:8.2%} {r['heldout_last_abs_rel_err_mean']:8.2%}"
                  f"  {r['anchor']}")
    for law, per in report.get("cross_size_pairs", {}).items():
        for name, res in per.items():
            for x in res["pairs"]:
                fit = "+".join(f"{n}M" for n in x["fit_sizes_M"])
                print(f"{fit + ' → ' + str(x['predict_size_M']) + 'M':18s} {law:13s} {name:7s} "
                      f"{x['n_heldout']:3d} {x['heldout_mean_rel_err']:8.2%} "
                      f"{x['heldout_worst_rel_err']:8.2%}")
            print(f"{'two sizes, mean':18s} {law:13s} {name:7s}     "
                  f"{res['mean_rel_err_over_pairs']:8.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
