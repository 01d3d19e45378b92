"""Synthetic study data with known ground truth, for tests and benchmarks of :mod:`fitting`.

Shipped in the package (as ``seqio/test_utils.py`` is) so that ``tests/fitting`` and the
``benchmarks/`` scripts share it. A two-pair study (en-de, en-zh) follows the joint law with
effective parameters, L_i(N; p) = β_i (f̂_i(p) N)^−α_i + L∞_i (Fernandes eq. 7/9) with the
f̂ of eq. 12; :data:`TRUTH` holds its parameters.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

__all__ = [
    "TRUTH",
    "WEIGHTS",
    "f_hat",
    "true_loss",
    "make_final_table",
    "make_curves_table",
    "write_run_dirs",
]

#: pair -> (alpha, beta_1, l_inf, (c1, c2, c3) of f̂ eq. 12)
TRUTH: dict[str, tuple[float, float, float, tuple[float, float, float]]] = {
    "en-de": (0.30, 30.0, 1.00, (0.10, 2.0, 1.0)),
    "en-zh": (0.40, 60.0, 1.50, (0.05, 1.5, 1.5)),
}
#: the two-pair weight grid of a study (weight of en-de; en-zh gets 1 − p)
WEIGHTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.95, 1.0)


def f_hat(p: ArrayLike, c1: float, c2: float, c3: float) -> np.ndarray:
    """Effective fraction of parameters f̂(p) = p + c1 p^c2 (1 − p)^c3 (Fernandes eq. 12)."""
    p = np.asarray(p, dtype=float)
    return p + c1 * p**c2 * (1 - p) ** c3


def true_loss(pair: str, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """The noiseless loss of ``pair`` at size ``n`` and weight ``p`` (eq. 7 with f̂ of eq. 12)."""
    a, b1, li, c = TRUTH[pair]
    return b1 * (f_hat(p, *c) * np.asarray(n, float)) ** -a + li


def make_final_table(sizes: ArrayLike | None = None, weights: Sequence[float] = WEIGHTS,
                     noise: float = 0.01, seed: int = 0,
                     zero_shot_loss: float = 6.0) -> pd.DataFrame:
    """Final losses of a 2-pair study: one row per (size, weight of en-de, pair).

    Tidy-table columns; values are :func:`true_loss` times (1 + ``noise``·ε), ε standard
    normal; a pair with weight 0 gets ``zero_shot_loss``. Default sizes: 8 from 2e5 to 2e7.
    """
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


def make_curves_table(final: pd.DataFrame, steps: Sequence[int] = (100, 200, 400, 600, 800, 1000),
                      drop: float = 0.5, rate: float = 0.5) -> pd.DataFrame:
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
    """Write run.json + metrics.jsonl run directories (metrics schema v1) for the final table.

    One directory per ``run_id`` under ``root``; each pair gets loss rows at steps 500 (value
    ×1.2) and 1000 (the table's value), plus one ``train_loss`` row. Returns the directories.
    """
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
