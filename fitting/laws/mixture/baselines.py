"""The obvious mixtures a recommendation is compared with: uniform, temperature sampling and
UniMax (:mod:`fitting.data.sampling`), each predicted by the law at the recommendation's size,
and the constraint check both use."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fitting.data.sampling import temperature_weights, unimax_weights

__all__ = ["TEMPERATURES", "baseline_mixtures", "constraint_violations"]

TEMPERATURES = (1.0, 5.0, 100.0)


def constraint_violations(w: np.ndarray, pred: np.ndarray, cap: np.ndarray, max_loss: np.ndarray,
                          pairs: list[str]) -> list[str]:
    """The constraints the weights ``w`` (predicted losses ``pred``) break, as readable lines."""
    out = [f"weight {p} {w[i]:.3g} > max {cap[i]:.3g}" for i, p in enumerate(pairs)
           if w[i] > cap[i] + 1e-6]
    out += [f"loss {p} {pred[i]:.4g} > max {max_loss[i]:.4g}" for i, p in enumerate(pairs)
            if np.isfinite(max_loss[i]) and not pred[i] <= max_loss[i] + 1e-9]
    return out


def baseline_mixtures(pairs: list[str], ds: dict[str, float], budget: float | None,
                      epoch_cap: float | None, losses: Callable[[np.ndarray], np.ndarray],
                      objective: Callable[[np.ndarray], float], cap: np.ndarray,
                      lmax: np.ndarray,
                      criterion: Callable[[np.ndarray], float] | None = None
                      ) -> tuple[dict, dict]:
    """The baselines at the recommendation's size: uniform, temperature T ∈ :data:`TEMPERATURES`
    (need every pair's data size) and UniMax (data sizes, budget and epoch cap), each with its
    weights, predicted losses (``losses(w)``), objective, the recommendation's ``criterion``
    (when given) and the constraints it violates; and {baseline: why skipped}."""
    k = len(pairs)
    cands: dict[str, np.ndarray] = {"uniform": np.full(k, 1.0 / k)}
    skipped: dict[str, str] = {}
    if len(ds) == k:
        sizes = [ds[p] for p in pairs]
        for t in TEMPERATURES:
            cands[f"temperature T={t:g}"] = temperature_weights(sizes, t)
        if budget and epoch_cap:
            cands["unimax"] = unimax_weights(sizes, budget, epoch_cap)
        else:
            skipped["unimax"] = "needs the budget in examples and an epoch cap"
    else:
        why = f"needs data_size for every pair (known for {sorted(ds)})"
        for t in TEMPERATURES:
            skipped[f"temperature T={t:g}"] = why
        skipped["unimax"] = why
    out = {}
    for name, w in cands.items():
        pred = losses(w)
        v = constraint_violations(w, pred, cap, lmax, pairs)
        out[name] = {"weights": {p: float(w[i]) for i, p in enumerate(pairs)},
                     "predicted": {p: float(pred[i]) for i, p in enumerate(pairs)},
                     "objective": objective(w), "violates": bool(v), "violations": v}
        if criterion is not None:
            out[name]["criterion"] = criterion(w)
    return out, skipped
