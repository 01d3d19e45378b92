"""The annealing momentum λ of the curve laws, swept on finished studies: the report's three
curve verdicts — the longer run (the last third of each run predicted from its first two
thirds), the later cool-down (each branch's and the parent's cooled-down end predicted from the
stable phase and the middle branch) and the early stop (each run's end predicted from its first
``--fraction``) — recomputed at each λ on the same tables.

λ sets how long the annealing area S2 of the LR-annealing law (Tissue et al. 2024, eq. 1)
remembers a drop of the learning rate: with λ = 0.8 a drop is forgotten within ≈ 5 steps, so
every cool-down to zero earns about the same S2 whatever its length; with λ near 1 a 400-step
cool-down earns more than a 90-step one. Per study, pair and λ: RMSE of the relative errors
of each verdict against 3σ_seed (the report's rule, σ_seed the seed sd at the largest repeated
size), and the mean signed error of each kind of end (the parent's own end, the earliest and the
latest branch).

Choose λ on some studies, judge it on others: the table names the studies it read.

``--forms`` instead compares the law's forms on the later-cool-down ends alone (every family
of every pair, fitted on its stable phase and middle branch, judged on the evaluation loss as
the report does): the annealing law's relative and additive forms at each λ of ``--lams``, and
the Multi-Power Law (Luo et al. 2025), which needs no λ.

Usage (from the repository root):
    nice python benchmarks/curve_lambda.py OUT [OUT …] [--lams 0.8 0.9 0.95 0.97 0.99]
        [--loss train] [--fraction 0.6] [--json FILE]

``--loss train`` drops a study's probe rows first, so that the curves are the per-pair
training loss, as in a study without probes (the default study's setting).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # run or loaded by path

from _common import machine  # noqa: E402  (benchmarks/_common.py)
from early_stop import heldout_ids  # noqa: E402  (benchmarks/early_stop.py)

from fitting.data.tables import read_table  # noqa: E402
from fitting.laws.curves.branches import branch_families, predict_branch_ends  # noqa: E402
from fitting.laws.curves.learning_curve import cooldown_start  # noqa: E402
from fitting.laws.curves.runs import PROBE_METRIC, pair_training_curves  # noqa: E402
from fitting.report.chinchilla import largest_size_seed_noises  # noqa: E402
from fitting.report.curves import FIT_BRANCHES, curve_continuations, evaluated_ends  # noqa: E402
from fitting.report.early_stop import early_stop_payload  # noqa: E402
from fitting.report.extrapolation import (  # noqa: E402
    FROM_FRACTION,
    NOISE_MULTIPLE,
    longer_run_errors,
)
from fitting.report.view import prepare_view  # noqa: E402


def rmse(errors: list[float]) -> float:
    e = np.asarray([v for v in errors if np.isfinite(v)], dtype=float)
    return float(np.sqrt(np.mean(e ** 2))) if e.size else float("nan")


def end_kinds(ends: list[dict]) -> dict[str, float]:
    """Mean signed error of the parents' own ends and of each family's earliest and latest
    tested branch (the curve section's ``ends``)."""
    kinds: dict[str, list[float]] = {"parent": [], "earliest branch": [], "latest branch": []}
    families: dict[str, list[tuple[float, float]]] = {}
    for e in ends:
        if e.get("error") is None or e.get("fitted"):
            continue
        if str(e["run"]) == str(e.get("parent")):
            kinds["parent"].append(float(e["error"]))
        else:
            families.setdefault(str(e.get("parent")), []).append(
                (float(e["branch_step"]), float(e["error"])))
    for branches in families.values():
        branches.sort()
        kinds["earliest branch"].append(branches[0][1])
        kinds["latest branch"].append(branches[-1][1])
    return {k: float(np.mean(v)) if v else float("nan") for k, v in kinds.items()}


def load_view(out: Path, loss: str):
    table = read_table(str(out / "metrics.csv"))
    if loss == "train" and "metric" in table.columns:
        table = table[table["metric"] != PROBE_METRIC]
    return prepare_view(table, heldout_runs=heldout_ids(out, table))


def form_variants(lams: list[float]) -> list[tuple[str, str, dict]]:
    """(name, law, keywords) of ``--forms``."""
    out = [(f"{form} λ {lam:g}", "lr_annealing", {"lam": lam, "form": form})
           for form in ("relative", "additive") for lam in lams]
    return out + [("multi-power", "multi_power", {})]


def seed_sigmas(view) -> dict[str, float]:
    """{pair: σ_seed} the report judges against (the relative seed sd at the largest size)."""
    return {p: v.sigma for p, v in largest_size_seed_noises(view.seeds)[0].items()}


def forms_study(out: Path, lams: list[float], loss: str) -> dict:
    """{"sigma": {pair: σ_seed}, "pairs": {pair: {variant: {"errors": [...], "parent": [...],
    "earliest": [...]}}}}: every family's later-cool-down ends under each form (the report's
    fit set, window and targets)."""
    view = load_view(out, loss)
    result: dict = {}
    for pair in view.points:
        curves = pair_training_curves(view.table_fit, pair)
        ends = evaluated_ends(view, pair, curves)
        rows: dict = {name: {"errors": [], "parent": [], "earliest": []}
                      for name, _, _ in form_variants(lams)}
        for parent, branches in branch_families(curves).items():
            fam = {r: curves[r] for r in [parent, *branches] if r in ends}
            if parent not in fam or len(fam) < 3:
                continue
            par = curves[parent]
            first = min(fam[b].branch_step for b in fam if b != parent)
            for name, law, kw in form_variants(lams):
                res = predict_branch_ends(
                    fam, law=law, stable_until=cooldown_start(par.lr_steps, par.lr),
                    fit_branches=FIT_BRANCHES, from_step=FROM_FRACTION * float(par.steps.max()),
                    max_points=60, targets={r: ends[r] for r in fam}, **kw)
                for e in res.ends:
                    if e.fitted or e.error is None or not np.isfinite(e.error):
                        continue
                    rows[name]["errors"].append(float(e.error))
                    if e.run == parent:
                        rows[name]["parent"].append(float(e.error))
                    elif e.branch_step == first:
                        rows[name]["earliest"].append(float(e.error))
        result[pair] = rows
    return {"sigma": seed_sigmas(view), "pairs": result}


def one_study(out: Path, lams: list[float], loss: str, fraction: float) -> dict:
    view = load_view(out, loss)
    result: dict = {"sigma": seed_sigmas(view), "lams": {}}
    for lam in lams:
        t0 = time.perf_counter()
        curves, _ = curve_continuations(view, lam=lam)
        stop = early_stop_payload(view, fraction, lam=lam) if fraction < 1 else None
        per_pair = {}
        for pair in view.points:
            longer, why, _ = longer_run_errors(view, pair, lam=lam)
            got = ((curves or {}).get("pairs") or {}).get(pair) or {}
            later = list(got.get("errors") or [])
            ends = (stop or {}).get("pairs", {}).get(pair, {}).get("ends", [])
            within = [e["within_3sigma"] for e in ends if e.get("within_3sigma") is not None]
            per_pair[pair] = {"longer_rmse": rmse(longer), "later_rmse": rmse(later),
                              "kinds": end_kinds(got.get("ends") or []),
                              "stop_within": [int(sum(within)), len(within)], "why": why}
        result["lams"][str(lam)] = {"pairs": per_pair, "seconds": time.perf_counter() - t0}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="+", type=Path)
    parser.add_argument("--lams", nargs="+", type=float, default=[0.8, 0.9, 0.95, 0.97, 0.99])
    parser.add_argument("--loss", choices=("report", "train"), default="report",
                        help="report: the curves the report fits (the probe where present)")
    parser.add_argument("--fraction", type=float, default=0.6,
                        help="early stop's share of the steps (1: skip the early stop)")
    parser.add_argument("--forms", action="store_true",
                        help="compare the law's forms on the later-cool-down ends instead")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.forms:
        return forms_main(args)
    header(args, ["study", "pair", "λ", "longer run RMSE", "later cool-down RMSE", "3σ_seed",
                  "both within", "parent end / earliest / latest branch (mean signed)",
                  "early stop within 3σ"])
    results = {}
    for out in args.outs:
        res = results[str(out)] = one_study(out, args.lams, args.loss, args.fraction)
        for lam, d in res["lams"].items():
            for pair, r in d["pairs"].items():
                sig = res["sigma"].get(pair)
                lim = None if sig is None else NOISE_MULTIPLE * sig
                both = "–" if lim is None else (
                    "yes" if r["longer_rmse"] <= lim and r["later_rmse"] <= lim else "no")
                k = r["kinds"]
                sw = r["stop_within"]
                print(f"| {out.name} | {pair} | {lam} | {r['longer_rmse']:.2%} | "
                      f"{r['later_rmse']:.2%} | {'–' if lim is None else f'{lim:.2%}'} | "
                      f"{both} | {k['parent']:+.1%} / {k['earliest branch']:+.1%} / "
                      f"{k['latest branch']:+.1%} | {sw[0]}/{sw[1]} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


def header(args, columns: list[str]) -> None:
    """The machine, the loss and the studies read, then the table's head."""
    print(f"machine: {machine()}; loss: {args.loss}; studies: "
          + ", ".join(o.name for o in args.outs))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def forms_main(args) -> int:
    header(args, ["study", "pair", "form", "ends", "RMSE", "3σ_seed",
                  "parent end (mean signed)", "earliest branch (mean signed)"])
    results = {}
    for out in args.outs:
        res = results[str(out)] = forms_study(out, args.lams, args.loss)
        for pair, rows in res["pairs"].items():
            lim = res["sigma"].get(pair)
            for name, r in rows.items():
                mean = {k: float(np.mean(r[k])) if r[k] else float("nan")
                        for k in ("parent", "earliest")}
                print(f"| {out.name} | {pair} | {name} | {len(r['errors'])} | "
                      f"{rmse(r['errors']):.2%} | "
                      f"{'–' if lim is None else f'{NOISE_MULTIPLE * lim:.2%}'} | "
                      f"{mean['parent']:+.1%} | {mean['earliest']:+.1%} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
