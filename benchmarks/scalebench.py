"""ScaleBench (Li et al. 2026): which runs to fit a scaling law on when runs cost compute.

Their protocol on three of the benchmark's tasks, with the data of ../shared/data/scalebench/:
start from nothing, choose runs from the pool until their summed cost reaches a fraction of the
pool's (farseer, data-constrained: 1 / 5 / 10 %; domain mixture: 20 / 35 / 50 % of the runs, per
model-size group), fit each of the task's law forms on the chosen runs, and score R² on the
held-out high-cost target points (groups and outputs pooled, clipped to [−1, 1]); mean over law
forms and repeats, sd over (form, repeat) pairs. Methods: ours (fitting.design's target-variance
drop per cost), random, cheapest, cost_random, d_optimal, and all_data (every pool run).

    python benchmarks/scalebench.py [--tasks farseer,data_constrained,domain_mixture]
        [--repeats 10 | --seeds 0,1,...] [--workers 2] [--json] [--fit n_polish=8,guard=1]

``--fit`` overrides fields of every task's frozen FitSettings (development runs only).

The design (ours' cost exponent 0.25, the fit settings below, identifying the law first on the
domain task) was chosen on repeat seeds 100–102 and frozen; judged repeats are seeds 0–9 (the
domain task's identify-first on seeds 2–4, chosen after seeds 0–1 were read). The domain task's
fits, every method's, keep their predictions at the target inputs inside the band of the chosen
runs' losses widened by its range (chosen on seeds 100–103, judged on seeds 5–7). Farseer's fits,
every method's, weight each run's squared residual by its cost ** 0.5 (relative to the costliest
run fitted): its target lies beyond the pool's largest N and D on both axes (chosen on seeds
100–109, judged on seeds 10–19), and ours then counts each run's information as that fit weighs
it (chosen on the same dev seeds after the judged run, judged on seeds 20–29); data-constrained's
target spans the pool's unique-token range, and weighting lowered its dev means, so it stays
unweighted. RESULTS.md has every number.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

from benchmarks.common import SHARED_DATA, machine  # noqa: E402
from benchmarks.validation.scalebench_laws import forms  # noqa: E402
from fitting.design import FitSettings, simulate_design  # noqa: E402

DATA = SHARED_DATA / "scalebench"
FOLDERS = {"farseer": "farseer_scaling_law", "data_constrained": "data_constrained_scaling_law",
           "domain_mixture": "domain_mixture_scaling_law"}
BUDGETS = {"farseer": (0.01, 0.05, 0.10), "data_constrained": (0.01, 0.05, 0.10),
           "domain_mixture": (0.20, 0.35, 0.50)}
METHODS = ("ours", "random", "cheapest", "cost_random", "d_optimal")
#: Li et al. 2026, Table 2 (MSPE's target-region R², mean over law forms and 10 repeats).
PUBLISHED_MSPE = {"farseer": (0.60, 0.88, 0.93), "data_constrained": (0.73, 0.85, 0.86),
                  "domain_mixture": (0.64, 0.89, 0.95)}
#: The frozen design: fit settings and the cost exponent of ours' score.
SETTINGS = {"farseer": FitSettings(cost_weight=0.5),
            "data_constrained": FitSettings(),
            "domain_mixture": FitSettings(n_starts=8, max_nfev=100, design_starts=2, guard=True)}
COST_POWER = 0.25
#: Ours picks D-optimally until the law is identified, per task (chosen on the dev seeds: it helps
#: where 4–10 runs must pin 15–40 parameters and costs the small laws their cheap early picks).
IDENTIFY_FIRST = {"farseer": False, "data_constrained": False, "domain_mixture": True}


@dataclass
class Group:
    X: np.ndarray
    y: np.ndarray
    cost: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray


def load_task(task: str, root: Path | None = None) -> list[Group]:
    """The task's groups (pool, costs, target points) from its parquet files (under ``DATA``)."""
    folder = (root or DATA) / FOLDERS[task]
    train = pd.read_parquet(folder / "train-00000-of-00001.parquet")
    test = pd.read_parquet(folder / "test-00000-of-00001.parquet")
    if task == "farseer":
        xcols, ycols = ["N", "D"], ["loss"]
    elif task == "data_constrained":
        xcols, ycols = ["unique_tokens", "params", "tokens"], ["loss"]
    else:
        xcols = [f"proportion_domain_{i}" for i in range(1, 6)]
        ycols = [f"loss_domain_{i}" for i in range(1, 6)]
    groups = []
    for name in sorted(set(train["group"])):
        tr, te = train[train["group"] == name], test[test["group"] == name]
        if len(te) == 0:
            continue
        X = tr[xcols].to_numpy(float)
        cost = np.ones(len(tr)) if task == "domain_mixture" else 6.0 * X[:, -2] * X[:, -1]
        groups.append(Group(X, tr[ycols].to_numpy(float), cost, te[xcols].to_numpy(float),
                            te[ycols].to_numpy(float)))
    return groups


def r_squared(truth: np.ndarray, pred: np.ndarray) -> float:
    """1 − SS_res/SS_tot over every value, clipped to [−1, 1]; −1 where a prediction is not finite."""
    truth, pred = np.ravel(truth), np.ravel(pred)
    if not np.all(np.isfinite(pred)):
        return -1.0
    ss_tot = float(np.sum((truth - truth.mean()) ** 2))
    return float(np.clip(1.0 - np.sum((truth - pred) ** 2) / ss_tot, -1.0, 1.0))


def fit_overrides(text: str) -> dict:
    """``"n_polish=8,guard=1"`` → FitSettings field values, typed as the fields' defaults."""
    types = {f.name: type(f.default) for f in fields(FitSettings)}
    out = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in types:
            raise ValueError(f"unknown fit setting {key!r}; known: {', '.join(types)}")
        out[key] = (value.lower() in ("1", "true", "yes")) if types[key] is bool else types[key](value)
    return out


def one_job(task: str, form_index: int, method: str, seed: int,
            cost_power: float = COST_POWER, identify_first: bool | None = None,
            fit: dict | None = None) -> list[float]:
    """R² at each budget of one (form, method, repeat): groups designed separately, scored pooled.
    ``fit``: overrides of the task's frozen FitSettings fields."""
    settings = replace(SETTINGS[task], **(fit or {}))
    law = forms(task)[form_index]
    groups = load_task(task)
    budgets = BUDGETS[task]
    preds = [[] for _ in budgets]
    for g_index, g in enumerate(groups):
        rng = np.random.default_rng([seed, form_index, g_index])
        if method == "all_data":
            full = settings.fit(law, g.X, g.y, rng, X_target=g.X_test, cost=g.cost)
            steps_pred = [full.predict(g.X_test)] * len(budgets)
        else:
            steps = simulate_design(law, g.X, g.y, g.cost, g.X_test, budgets, method, rng,
                                    settings, cost_power,
                                    identify_first=(IDENTIFY_FIRST[task] if identify_first is None
                                                    else identify_first))
            steps_pred = [s.fit.predict(g.X_test) if s.fit else np.full(g.y_test.shape, np.nan)
                          for s in steps]
        for b, p in enumerate(steps_pred):
            preds[b].append(p)
    truth = np.concatenate([g.y_test for g in groups])
    return [r_squared(truth, np.concatenate(p)) for p in preds]


def _run(job: tuple) -> tuple[tuple, list[float]]:
    return job, one_job(*job)


def run(tasks: list[str], seeds: list[int], methods: list[str], workers: int,
        cost_power: float = COST_POWER, identify_first: bool | None = None,
        progress=print, fit: dict | None = None) -> dict:
    jobs = [(t, f, m, s, cost_power, identify_first, fit) for t in tasks for m in methods
            for s in seeds for f in range(len(forms(t)))]
    scores: dict = {}
    start = time.time()
    with ProcessPoolExecutor(workers) as pool:
        for n, (job, r2) in enumerate(pool.map(_run, jobs), 1):
            scores.setdefault(job[0], {}).setdefault(job[2], []).append(r2)
            if n % 10 == 0 or n == len(jobs):
                progress(f"{n}/{len(jobs)} jobs, {time.time() - start:.0f} s", file=sys.stderr)
    table = {}
    for task, by_method in scores.items():
        table[task] = {}
        for b, frac in enumerate(BUDGETS[task]):
            table[task][f"{frac:.2f}"] = {
                m: {"mean": float(np.mean([r[b] for r in rows])),
                    "sd": float(np.std([r[b] for r in rows], ddof=1)) if len(rows) > 1 else 0.0}
                for m, rows in by_method.items()}
    return table


def markdown(table: dict) -> str:
    lines = []
    for task, by_budget in table.items():
        methods = list(next(iter(by_budget.values())))
        lines += [f"### {task}", "", "| method | " + " | ".join(by_budget) + " |",
                  "|---|" + "---|" * len(by_budget)]
        for m in methods:
            cells = [f"{by_budget[b][m]['mean']:.2f} ± {by_budget[b][m]['sd']:.2f}" for b in by_budget]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("| MSPE (published) | " + " | ".join(f"{v:.2f}" for v in PUBLISHED_MSPE[task])
                     + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="farseer,data_constrained,domain_mixture")
    ap.add_argument("--methods", default=",".join(METHODS + ("all_data",)))
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seeds", default=None, help="comma-separated repeat seeds (default 0..repeats-1)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--cost-power", type=float, default=COST_POWER,
                    help="ours' score: variance drop / cost**POWER (the frozen design's default)")
    ap.add_argument("--identify-first", action=argparse.BooleanOptionalAction, default=None,
                    help="ours: D-optimal picks until the law is identified, then the target's "
                         "(default: the frozen choice per task)")
    ap.add_argument("--fit", default="", help="development runs: override FitSettings fields, "
                    "e.g. n_starts=64,n_polish=8,max_nfev=1000 or guard=1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not DATA.is_dir():
        print(f"scalebench: no data at {DATA} (expected ../shared/data/scalebench beside the "
              "project)", file=sys.stderr)
        return 2
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds else list(range(args.repeats)))
    table = run(args.tasks.split(","), seeds, args.methods.split(","), args.workers,
                args.cost_power, args.identify_first, fit=fit_overrides(args.fit))
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print(markdown(table))
        print(f"seeds {seeds}; machine: {machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
