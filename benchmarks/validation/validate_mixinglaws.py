"""Validation 5: held-out mixture proportions on Ye et al. 2024's data.

At one model size, per-domain final losses of mixtures of 3 Pile domains are split into K folds
of mixtures; on each fold we fit on the other mixtures and predict the held-out ones with

* Fernandes et al. 2023 eq. 11 at a fixed N: L_i(p_i) = β1·(f̂_i(p_i)·N)^−α + L∞ with f̂ of eq. 12
  and of eq. 13 (only the domain's own proportion p_i enters; p_i = 0 is outside the law);
* Ye et al.'s exponential mixing law L_i(r) = c_i + k_i·exp(Σ_j t_ij r_j) (all proportions),
  fitted the way Ye et al. describe: Huber loss (δ = 0.02) on the residuals, L-BFGS-B, from an
  11×11 grid of starts (c_i/min L × t_ii), the other t_ij starting at 0 and k_i solved for.

Reported per law: MAE (nats), RMSE of log(pred/true), max |error| on the held-out points with
p_i > 0 (the points both laws can predict), and for Ye's law also including p_i = 0.

The order of the domains inside the "proportions" strings is not stated in the data; it is
inferred as the permutation under which every domain's loss falls most consistently with its
own proportion (Spearman), and printed.

The data (Ye et al.'s losses as one tidy CSV, ``mixing_losses_tidy.csv``) are not vendored:
their repository states no licence. See benchmarks/data/README.md for where they come from; put
the CSV in benchmarks/data/mixinglaws/ or pass its folder with --data.

Usage (from the repository root):
    python benchmarks/validation/validate_mixinglaws.py [--data DIR] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import DATA  # noqa: E402  (public data: benchmarks/data/README.md)
from fitting.core.base import FitError  # noqa: E402
from fitting.core.options import NO_UNCERTAINTY
from fitting.laws.size.effective import fit_multilingual_law  # noqa: E402


def load(data_dir: str, mixture_set: str, model_size: str) -> tuple[pd.DataFrame, list[str], str]:
    """Final per-domain losses: one row per run with columns r_0..r_{K-1} and loss_<domain>."""
    d = pd.read_csv(os.path.join(data_dir, "mixing_losses_tidy.csv"))
    d = d[(d.mixture_set == mixture_set) & (d.model_size == model_size)].copy()
    if d.empty:
        raise SystemExit(f"no rows for mixture_set={mixture_set} model_size={model_size}")
    d = d[pd.to_numeric(d.step, errors="coerce").notna()]
    d["step"] = d.step.astype(int)
    # the step most runs reached (runs do not all have the same evaluations)
    per_run = d.groupby("run_id").step.max()
    step = int(per_run.mode().iloc[0])
    d = d[d.step == step]
    domains = sorted(d.valid_domain.unique())
    wide = d.pivot_table(index=["run_id", "proportions"], columns="valid_domain", values="loss",
                         aggfunc="mean").reset_index().dropna()
    props = np.array([[float(x) for x in s.split("-")] for s in wide.proportions])
    for j in range(props.shape[1]):
        wide[f"r_{j}"] = props[:, j]
    return wide, domains, f"step {step} ({len(wide)} of {len(per_run)} runs reached it)"


def infer_order(wide: pd.DataFrame, domains: list[str]) -> list[str]:
    """Domain order in the proportion vector: the permutation with most negative Spearman ρ."""
    k = len(domains)
    best, best_s = None, np.inf
    for perm in itertools.permutations(domains):
        s = sum(spearmanr(wide[f"r_{j}"], wide[perm[j]]).statistic for j in range(k))
        if s < best_s:
            best, best_s = list(perm), s
    return best


def fit_ye(R: np.ndarray, y: np.ndarray, i: int, delta: float = 0.02) -> np.ndarray:
    """Ye et al.'s law for domain i: params (c, log k, t_1..t_K); Huber(δ) + L-BFGS-B, 11×11 starts."""
    K = R.shape[1]

    def obj(x):
        e = np.exp(x[1] + R @ x[2:])
        r = x[0] + e - y
        a = np.abs(r)
        h = np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
        g_r = np.where(a <= delta, r, delta * np.sign(r))
        grad = np.concatenate([[g_r.sum()], [(g_r * e).sum()], R.T @ (g_r * e)])
        return float(h.sum()), grad

    best, best_v = None, np.inf
    lmin = float(y.min())
    for cf in np.linspace(0.0, 0.95, 11):
        for tii in np.linspace(-5.0, 0.0, 11):
            t = np.zeros(K)
            t[i] = tii
            c = cf * lmin
            logk = float(np.log(np.mean(np.maximum(y - c, 1e-6) / np.exp(R @ t))))
            x0 = np.concatenate([[c, logk], t])
            res = minimize(obj, x0, jac=True, method="L-BFGS-B",
                           bounds=[(None, lmin), (-20.0, 20.0)] + [(-20.0, 20.0)] * K,
                           options={"maxiter": 2000})
            if np.isfinite(res.fun) and res.fun < best_v:
                best, best_v = res.x, res.fun
    return best


def run(data_dir: str, mixture_set: str, model_size: str, folds: int, seed: int) -> dict:
    wide, domains, step_note = load(data_dir, mixture_set, model_size)
    order = infer_order(wide, domains)
    K = len(order)
    R = wide[[f"r_{j}" for j in range(K)]].to_numpy(float)
    N = 1.0  # one model size: β1 absorbs N^−α (eq. 11 at fixed N)
    rng = np.random.default_rng(seed)
    fold_of = rng.permutation(len(wide)) % folds
    laws = ["eq11+eq12", "eq11+eq13", "ye_exp"]
    preds = {law: np.full((len(wide), K), np.nan) for law in laws}
    failures: dict[str, int] = {law: 0 for law in laws}
    t0 = time.perf_counter()
    for f in range(folds):
        tr, te = fold_of != f, fold_of == f
        rows = []
        for j, dom in enumerate(order):
            for idx in np.flatnonzero(tr):
                rows.append({"pair": dom, "weight": R[idx, j], "n": N,
                             "loss": float(wide[dom].iloc[idx])})
        tab = pd.DataFrame(rows)
        for law, form in (("eq11+eq12", "eq12"), ("eq11+eq13", "eq13")):
            try:
                fit = fit_multilingual_law(tab, form=form,
                                           uncertainty=NO_UNCERTAINTY)
            except FitError:
                failures[law] += 1
                continue
            for j, dom in enumerate(order):
                p = R[te, j]
                with np.errstate(all="ignore"):
                    preds[law][te, j] = np.where(p > 0, fit.predict(N, p, dom), np.nan)
        for j, dom in enumerate(order):
            x = fit_ye(R[tr], wide[dom].to_numpy(float)[tr], j)
            preds["ye_exp"][te, j] = x[0] + np.exp(x[1] + R[te] @ x[2:])
    elapsed = time.perf_counter() - t0
    Y = wide[order].to_numpy(float)
    pos = R > 0

    def scores(P, mask, Yt=Y):
        m = mask & np.isfinite(P)
        e = P[m] - Yt[m]
        return {"n_points": int(m.sum()), "mae": float(np.mean(np.abs(e))),
                "rmse_log": float(np.sqrt(np.mean(np.log(P[m] / Yt[m]) ** 2))),
                "max_abs_err": float(np.max(np.abs(e)))}

    out = {
        "mixture_set": mixture_set, "model_size": model_size, "evaluation": step_note,
        "domain_order": order, "n_mixtures": int(len(wide)), "folds": folds, "seed": seed,
        "held_out_p_gt_0": {law: scores(preds[law], pos) for law in laws},
        "ye_exp_all_points": scores(preds["ye_exp"], np.ones_like(pos)),
        "per_domain_mae_p_gt_0": {
            law: {dom: scores(preds[law][:, [j]], pos[:, [j]], Y[:, [j]])["mae"]
                  for j, dom in enumerate(order)} for law in laws},
        "fit_failures": failures, "seconds": elapsed,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu",
        "loadavg": list(os.getloadavg()),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DATA / "mixinglaws"),
                    help="folder holding mixing_losses_tidy.csv (not vendored: no licence)")
    ap.add_argument("--mixture-set", default="3Mix")
    ap.add_argument("--model-size", default="410M")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    csv = os.path.join(a.data, "mixing_losses_tidy.csv")
    if not os.path.exists(csv):
        # Ye et al.'s repository has no licence, so the data are not part of this repository
        print(f"validate_mixinglaws: skipped: {csv} not found. The data are not vendored (their "
              "repository states no licence); benchmarks/data/README.md says where they come "
              "from. Pass --data DIR to run.", file=sys.stderr)
        sys.exit(0 if a.data == str(DATA / "mixinglaws") else 2)
    res = run(a.data, a.mixture_set, a.model_size, a.folds, a.seed)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{res['mixture_set']} @ {res['model_size']}: {res['n_mixtures']} mixtures, "
          f"{res['evaluation']}; {res['folds']}-fold CV over mixtures (seed {res['seed']})")
    print(f"inferred domain order in 'proportions': {res['domain_order']}")
    print(f"{'law':12s} {'points':>6s} {'MAE':>8s} {'RMSE log':>9s} {'max|err|':>9s}")
    for law, s in res["held_out_p_gt_0"].items():
        print(f"{law:12s} {s['n_points']:6d} {s['mae']:8.4f} {s['rmse_log']:9.4f} "
              f"{s['max_abs_err']:9.4f}")
    s = res["ye_exp_all_points"]
    print(f"{'ye (all)':12s} {s['n_points']:6d} {s['mae']:8.4f} {s['rmse_log']:9.4f} "
          f"{s['max_abs_err']:9.4f}")
    print("per-domain MAE (p>0):", json.dumps(res["per_domain_mae_p_gt_0"]))
    print(f"fit failures: {res['fit_failures']}; {res['seconds']:.1f} s; "
          f"{res['machine']}; load average {res['loadavg']}")


if __name__ == "__main__":
    main()
