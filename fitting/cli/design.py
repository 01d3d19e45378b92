"""``mnmt-fit design``: which runs to train next, within a budget, to make a target certain.

    mnmt-fit design TABLE --pool POOL --target TARGET --budget B [--law chinchilla]
                    [--columns n=params,d=tokens,loss=val_loss] [--cost-power 1] [--json]
    mnmt-fit design TABLE --pool POOL --target TARGET --budget 10% --simulate [--json]

TABLE holds the finished runs (the law's input columns and ``loss``), POOL the runs one could
train (the same inputs, a ``cost`` column, else 6·N·D; rows with a zero input are skipped, e.g.
``mnmt-study design-pool``'s rows of a pair at weight 0), TARGET the points to predict (a table,
or ``n=1e9,d=2e10``). ``--budget`` is in the pool's cost units or a percentage of its total.
``--simulate``: POOL's losses are known; the whole sequential loop runs from TABLE's runs,
revealing a run's loss only once it is chosen.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pandas as pd

from fitting.core.base import FitError
from fitting.data.tables import read_table
from fitting.design.laws import DESIGN_LAWS, design_law
from fitting.design.parametric import ParametricFit
from fitting.design.plan import current_target_sd, plan_batch
from fitting.design.simulate import FitSettings, simulate_design
from fitting.design.strategies import STRATEGIES

__all__ = ["add_design_parser", "design_command", "design_text"]

Z95 = 1.959963984540054


def add_design_parser(sub: Any) -> None:
    """The ``design`` subcommand's options."""
    p = sub.add_parser("design", help="the next runs to train: most certainty on a target per cost")
    p.add_argument("table", metavar="TABLE", nargs="?",
                   help="finished runs (CSV/Parquet): inputs and loss (or --prior)")
    p.add_argument("--prior", metavar="JSON",
                   help="no runs yet: the law's parameters guessed ({\"params\": {name: value}, "
                        "\"sigma\": residual sd}); the plan starts from them alone")
    p.add_argument("--pool", required=True, help="candidate runs: inputs, cost (default 6·N·D)")
    p.add_argument("--target", required=True,
                   help="target points: a table, or inline n=1e9,d=2e10 (one point)")
    p.add_argument("--budget", required=True, help="cost units, or a percentage of the pool: 10%%")
    p.add_argument("--law", default="chinchilla", choices=sorted(DESIGN_LAWS))
    p.add_argument("--columns", help="map our column names to yours: n=params,d=tokens,loss=val")
    p.add_argument("--strategy", default="ours", choices=sorted(STRATEGIES),
                   help="--simulate only: the strategy to run (baselines for comparison)")
    p.add_argument("--cost-power", type=float, default=1.0,
                   help="score = variance drop / cost**POWER (1: per unit of cost)")
    p.add_argument("--simulate", action="store_true",
                   help="the pool's losses are known: run the sequential loop, revealing each")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--out", help="write the JSON result to this file")


def _inputs(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> np.ndarray:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise FitError(f"{what}: missing column(s) {missing}; the law reads {list(columns)} "
                       "(map yours with --columns)", column=missing[0])
    X = df[list(columns)].to_numpy(float)
    bad = ~np.isfinite(X) | (X <= 0)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise FitError(f"{what}: row {row}: column {columns[col]!r} must be a positive number, "
                       f"got {X[row, col]!r}", column=columns[col], row=int(row))
    return X


def _positive_rows(pool: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    """Pool rows whose inputs are all positive (a pair trained at weight 0 has no tokens of it);
    rows are numbered after these are dropped."""
    present = [c for c in columns if c in pool.columns]
    values = pool[present].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    return np.all(np.isfinite(values) & (values > 0), axis=1)


def _losses(df: pd.DataFrame, what: str) -> np.ndarray:
    if "loss" not in df.columns:
        raise FitError(f"{what}: no 'loss' column (map yours with --columns loss=...)",
                       column="loss")
    y = df["loss"].to_numpy(float)
    if not np.all(np.isfinite(y)):
        raise FitError(f"{what}: row {int(np.flatnonzero(~np.isfinite(y))[0])}: loss is not "
                       "finite", column="loss")
    return y


def _target(text: str, columns: tuple[str, ...], mapping: str | None) -> np.ndarray:
    if "=" in text and not text.lower().endswith((".csv", ".parquet", ".pq", ".tsv")):
        values = dict(item.split("=", 1) for item in text.split(",") if item.strip())
        try:
            return _inputs(pd.DataFrame([{k.strip(): float(v) for k, v in values.items()}]),
                           columns, "--target")
        except ValueError:
            raise FitError(f"--target: expected name=number items, got {text!r}") from None
    return _inputs(read_table(text, mapping), columns, text)


def _cost(pool: pd.DataFrame, X: np.ndarray, columns: tuple[str, ...], what: str) -> np.ndarray:
    if "cost" in pool.columns:
        cost = pool["cost"].to_numpy(float)
    elif {"n", "d"} <= set(columns):
        cost = 6.0 * X[:, columns.index("n")] * X[:, columns.index("d")]
    else:
        raise FitError(f"{what}: no 'cost' column", column="cost")
    if not np.all(np.isfinite(cost) & (cost > 0)):
        raise FitError(f"{what}: row {int(np.flatnonzero(~(cost > 0))[0])}: cost must be positive",
                       column="cost")
    return cost


def _prior_fit(law, path: str) -> ParametricFit:
    """A fit made of guessed parameters and a guessed residual sd (no runs behind it)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            prior = json.load(f)
        theta = np.array([float(prior["params"][name]) for name in law.param_names])
        sigma = float(prior["sigma"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise FitError(f"--prior {path}: expected {{\"params\": {{{', '.join(law.param_names)}}}, "
                       f"\"sigma\": number}}: {err}") from None
    u = law.to_u(theta)
    return ParametricFit(law, u, law.to_theta(u), float("nan"), 0, sigma**2)


def _budget(text: str, cost: np.ndarray) -> float:
    try:
        if text.strip().endswith("%"):
            return float(text.strip()[:-1]) / 100.0 * float(cost.sum())
        return float(text)
    except ValueError:
        raise FitError(f"--budget: expected a number or a percentage, got {text!r}") from None


def _interval(fit: ParametricFit, X_target: np.ndarray, sd: np.ndarray) -> list[dict[str, float]]:
    pred = fit.predict(X_target)[:, 0]
    return [{"prediction": float(p), "sd": float(s), "low95": float(p - Z95 * s),
             "high95": float(p + Z95 * s), "half_width_rel": float(Z95 * s / p)}
            for p, s in zip(pred, sd, strict=True)]


def design_command(args: argparse.Namespace) -> dict[str, Any]:
    """The plan (or the simulated loop) as a JSON-ready dict."""
    spec = design_law(args.law)
    if (args.table is None) == (args.prior is None):
        raise FitError("design: give either TABLE (the finished runs) or --prior, not both")
    if args.prior is not None and args.simulate:
        raise FitError("design: --simulate needs TABLE (the finished runs), not --prior")
    pool = read_table(args.pool, args.columns)
    usable = _positive_rows(pool, spec.columns)
    pool = pool[usable].reset_index(drop=True)
    X_pool = _inputs(pool, spec.columns, args.pool)
    cost = _cost(pool, X_pool, spec.columns, args.pool)
    X_target = _target(args.target, spec.columns, args.columns)
    budget = _budget(args.budget, cost)
    rng = np.random.default_rng(args.seed)
    settings = FitSettings()
    if args.prior is not None:
        fit = _prior_fit(spec.law, args.prior)
        X_done, y_done = np.empty((0, len(spec.columns))), np.empty(0)
    else:
        done = read_table(args.table, args.columns)
        X_done, y_done = _inputs(done, spec.columns, args.table), _losses(done, args.table)
        fit = settings.fit(spec.law, X_done, y_done, rng)
    out: dict[str, Any] = {
        "law": args.law, "budget": budget, "pool_cost": float(cost.sum()),
        "pool_rows_skipped": int((~usable).sum()),
        "fit": dict(zip(spec.law.param_names or [str(i) for i in range(spec.law.n_params)],
                        map(float, fit.theta), strict=True)),
        "target_now": _interval(fit, X_target, current_target_sd(fit, X_done, X_target)),
        "interval": "linearised (delta method) from the fit's residual variance; not calibrated",
    }
    if args.simulate:
        y_pool = _losses(pool, args.pool)
        X_all = np.vstack([X_done, X_pool])
        y_all = np.concatenate([y_done, y_pool])
        cost_all = np.concatenate([np.zeros(len(X_done)), cost])
        step = simulate_design(spec.law, X_all, y_all, cost_all, X_target,
                               (budget / float(cost.sum()),), args.strategy, rng, settings,
                               args.cost_power, finished=range(len(X_done)))[0]
        picked = [i - len(X_done) for i in step.chosen if i >= len(X_done)]
        out["chosen"] = [{"row": int(i), "cost": float(cost[i]), "loss": float(y_pool[i])}
                         for i in picked]
        out["spent"] = float(cost[picked].sum())
        X_fit = X_all[step.chosen]
        out["target_after"] = _interval(step.fit, X_target,
                                        current_target_sd(step.fit, X_fit, X_target))
        return out
    plan = plan_batch(fit, X_done, X_pool, cost, X_target, budget, args.cost_power)
    centre = fit.predict(X_target)[:, 0]
    hours = (pool["accelerator_hours"].to_numpy(float) if "accelerator_hours" in pool.columns
             else None)
    out["chosen"] = [{"row": p.index, "cost": p.cost, "cumulative_cost": p.cumulative_cost,
                      "target_half_width_rel_after": [float(h) for h in Z95 * p.target_sd / centre],
                      **({"accelerator_hours": float(hours[p.index]),
                          "label": str(pool["size"][p.index]) if "size" in pool.columns else ""}
                         if hours is not None else {})}
                     for p in plan]
    out["spent"] = plan[-1].cumulative_cost if plan else 0.0
    return out


def design_text(res: dict[str, Any]) -> str:
    """The plan as a user reads it: the target now, the runs in order, the target after."""
    lines = [f"law {res['law']}; budget {res['budget']:.4g} of the pool's {res['pool_cost']:.4g}"
             + (f" ({res['pool_rows_skipped']} pool rows with a zero input skipped)"
                if res.get("pool_rows_skipped") else ""),
             "target now (95 %, " + res["interval"] + "):"]
    lines += [f"  {t['prediction']:.4g}  [{t['low95']:.4g}, {t['high95']:.4g}]  "
              f"±{100 * t['half_width_rel']:.1f} %" for t in res["target_now"]]
    lines.append(f"runs chosen, in order ({len(res['chosen'])}, cost {res['spent']:.4g}):")
    for k, c in enumerate(res["chosen"], 1):
        extra = (f"  loss {c['loss']:.4g}" if "loss" in c else
                 "  target ±" + ", ".join(f"{100 * h:.1f} %"
                                          for h in c["target_half_width_rel_after"]))
        hours = (f"  {c['label']} {c['accelerator_hours']:,.0f} accelerator-h"
                 if "accelerator_hours" in c else "")
        lines.append(f"  {k:3d}. pool row {c['row']}  cost {c['cost']:.4g}{hours}{extra}")
    if "target_after" in res:
        lines.append("target after refitting on them:")
        lines += [f"  {t['prediction']:.4g}  [{t['low95']:.4g}, {t['high95']:.4g}]  "
                  f"±{100 * t['half_width_rel']:.1f} %" for t in res["target_after"]]
    return "\n".join(lines)
