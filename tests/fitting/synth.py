"""Synthetic study data with known ground truth for the fitting tests (no /work/shared access)."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

# pair -> (alpha, beta_1, l_inf, (c1, c2, c3) of f̂ eq. 12)
TRUTH = {
    "en-de": (0.30, 30.0, 1.00, (0.10, 2.0, 1.0)),
    "en-zh": (0.40, 60.0, 1.50, (0.05, 1.5, 1.5)),
}
WEIGHTS = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


def f_hat(p, c1, c2, c3):
    p = np.asarray(p, dtype=float)
    return p + c1 * p**c2 * (1 - p) ** c3


def true_loss(pair: str, n, p):
    a, b1, li, c = TRUTH[pair]
    return b1 * (f_hat(p, *c) * np.asarray(n, float)) ** -a + li


def make_final_table(sizes=None, weights=WEIGHTS, noise=0.01, seed=0, zero_shot_loss=6.0):
    """Final losses of a 2-pair study: one row per (size, weight of en-de, pair)."""
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(2e5, 2e7, 8) if sizes is None else np.asarray(sizes, float)
    rows = []
    for p in weights:
        for j, n in enumerate(sizes):
            run = f"s{j}_p{p:.2f}"
            for pair, pp in (("en-de", p), ("en-zh", 1.0 - p)):
                pp = round(pp, 10)
                loss = true_loss(pair, n, pp) if pp > 0 else zero_shot_loss
                rows.append(dict(run_id=run, study="t", family="mini", size=f"s{j}", n=int(n),
                                 n_enc=int(n) // 2, n_dec=int(n) - int(n) // 2, pair=pair,
                                 weight=pp, data_size=np.nan, eval_set="validation",
                                 metric="loss", step=1000, tokens=1000 * 512,
                                 value=loss * (1 + noise * rng.standard_normal()), final=True))
    return pd.DataFrame(rows)


def make_curves_table(final: pd.DataFrame, steps=(100, 200, 400, 600, 800, 1000), drop=0.5,
                      rate=0.5):
    """Add learning-curve rows: value(t) = final + drop·((t/T)^−rate − 1); final rows unchanged."""
    rows = []
    T = max(steps)
    for _, r in final.iterrows():
        for s in steps:
            d = r.to_dict()
            d["step"] = s
            d["final"] = s == T
            d["value"] = r["value"] + drop * ((s / T) ** -rate - 1.0)
            rows.append(d)
    return pd.DataFrame(rows)


def write_run_dirs(final: pd.DataFrame, root: str) -> list[str]:
    """Write run.json + metrics.jsonl run directories (metrics schema v1) for the final table."""
    dirs = []
    for run, g in final.groupby("run_id"):
        d = os.path.join(root, str(run))
        os.makedirs(d, exist_ok=True)
        first = g.iloc[0]
        meta = {
            "schema_version": 1, "run_id": run, "study": "t", "status": "finished",
            "model": {"family": "mini", "size": first["size"], "config": {},
                      "params": {"total": int(first["n"]) + 1000, "embedding": 1000,
                                 "non_embedding": int(first["n"]), "encoder": int(first["n_enc"]),
                                 "decoder": int(first["n_dec"])}, "vocab_size": 100},
            "mixture": {"name": "m", "weights": {r.pair: float(r.weight) for r in g.itertuples()},
                        "caps": {r.pair: None for r in g.itertuples()}, "tasks": {}},
            "training": {"steps": 1000, "batch_size": 8, "batch_tokens": 512,
                         "feature_lengths": {"inputs": 64, "targets": 64}, "seed": 0},
        }
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(meta, f)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            for r in g.itertuples():
                for step, scale in ((500, 1.2), (1000, 1.0)):
                    f.write(json.dumps({"run_id": run, "step": step, "tokens": step * 512,
                                        "task": r.pair, "eval_set": "validation",
                                        "metric": "loss", "value": r.value * scale}) + "\n")
            f.write(json.dumps({"run_id": run, "step": 1000, "tokens": 512000, "task": "all",
                                "eval_set": "train", "metric": "train_loss", "value": 2.0}) + "\n")
        dirs.append(d)
    return dirs
