"""Transfer measured directly from the runs, beside the eq. 11 law's τ
(:func:`fitting.laws.mixture_compare.transfer_matrix`).

The law's τ is one parameter among many of a fit dominated by the steep losses near weight 0;
two measurements answer "who helps whom" without a law:

* :func:`zero_shot_losses` — pair i's loss in the runs trained on one other pair j only
  (w_j = 1, w_i = 0): a model that never saw i's data scores far better on it after a related
  pair (shared lexicon, word order) than after an unrelated one. Lower = closer.
* :func:`contrasts` — pair i at one weight c, the rest on a single source j (the design's
  transfer contrasts): L_i(c; j). Lower = j helps i more at equal own data.

:func:`compare_sources` ranks two sources of a target by either measurement: the difference
with its sd, sd² = sd_a² + sd_b², each the seed sd of the mean where a mixture has two seeds or
more, else the sd of the run's last 3 evaluations (``noise`` says which: the latter is a
stand-in, not the seed noise); ``beyond_2sd`` when |difference| > 2 sd.
"""

from __future__ import annotations

import numpy as np

from fitting.laws.mixture_runs import MixtureRuns

__all__ = ["zero_shot_losses", "contrasts", "compare_sources", "direct_transfer"]


def _mean_sd(runs: MixtureRuns, rows: np.ndarray, i: int) -> tuple[float, float, str, int]:
    """Mean of pair i's loss over ``rows`` (seeds of one mixture and size), the sd of that mean
    and where it came from, and the number of runs."""
    y = runs.Y[rows, i]
    ok = np.isfinite(y)
    y = y[ok]
    if not len(y):
        return float("nan"), float("nan"), "none", 0
    if len(y) >= 2:
        return float(y.mean()), float(y.std(ddof=1) / np.sqrt(len(y))), "seed sd", len(y)
    sd = runs.curve_sd[rows, i][ok]
    return (float(y[0]), float(sd[0]) if np.isfinite(sd[0]) else float("nan"),
            "last 3 evaluations" if np.isfinite(sd[0]) else "none", 1)


def _groups(runs: MixtureRuns, select: np.ndarray) -> dict[tuple[str, float], np.ndarray]:
    """Rows of ``select`` grouped by (mixture, size): the seeds of one run."""
    out: dict[tuple[str, float], list[int]] = {}
    keys = runs.mixture_keys
    for r in np.flatnonzero(select):
        out.setdefault((keys[r], float(runs.n[r])), []).append(r)
    return {k: np.array(v) for k, v in out.items()}


def zero_shot_losses(runs: MixtureRuns) -> list[dict]:
    """One entry per (target i, source j, size): pair i's loss after training on j alone
    (w_j = 1), with its sd and noise source."""
    out = []
    single = np.isclose(runs.W.max(axis=1), 1.0)
    for (_, n), rows in _groups(runs, single).items():
        j = int(np.argmax(runs.W[rows[0]]))
        for i, target in enumerate(runs.pairs):
            if i == j:
                continue
            mean, sd, noise, count = _mean_sd(runs, rows, i)
            if count:
                out.append({"target": target, "source": runs.pairs[j], "n": n, "loss": mean,
                            "sd": sd, "noise": noise, "runs": count})
    return out


def contrasts(runs: MixtureRuns) -> list[dict]:
    """One entry per (target i, own weight c, source j, size) for the runs with exactly two
    trained pairs, i at 0 < c ≤ 0.5 and the rest on j: L_i(c; j) with its sd and noise source.
    (A run of two pairs at 0.5 each counts for both.)"""
    out = []
    two = (runs.W > 0).sum(axis=1) == 2
    for (_, n), rows in _groups(runs, two).items():
        w = runs.W[rows[0]]
        trained = np.flatnonzero(w > 0)
        for i in trained:
            j = int(trained[trained != i][0])
            if not 0 < w[i] <= 0.5 + 1e-9:
                continue
            mean, sd, noise, count = _mean_sd(runs, rows, int(i))
            if count:
                out.append({"target": runs.pairs[i], "source": runs.pairs[j],
                            "weight": float(w[i]), "n": n, "loss": mean, "sd": sd,
                            "noise": noise, "runs": count})
    return out


def compare_sources(entries: list[dict], target: str, better: str, worse: str) -> list[dict]:
    """Per size (and own weight, for contrasts): loss after ``worse`` minus loss after
    ``better`` for ``target`` (positive: ``better`` is the closer source), its sd and whether
    it is beyond 2 sd."""
    def key(e):
        return (e["n"], e.get("weight"))

    a = {key(e): e for e in entries if e["target"] == target and e["source"] == better}
    b = {key(e): e for e in entries if e["target"] == target and e["source"] == worse}
    out = []
    for k in sorted(set(a) & set(b), key=lambda t: (t[0], t[1] or 0.0)):
        diff = b[k]["loss"] - a[k]["loss"]
        sd = float(np.hypot(a[k]["sd"], b[k]["sd"]))
        noise = sorted({a[k]["noise"], b[k]["noise"]})
        out.append({"target": target, "better": better, "worse": worse, "n": k[0],
                    "weight": k[1], "difference": float(diff), "sd": sd,
                    "beyond_2sd": bool(np.isfinite(sd) and diff > 2 * sd),
                    "noise": " and ".join(noise)})
    return out


def direct_transfer(runs: MixtureRuns) -> dict:
    """``fits.json["mixture"]["transfer_direct"]``: the zero-shot losses and contrasts of
    ``runs``, and per target the source whose zero-shot loss is lowest at every size (its
    closest relative by this measure) and the ranking of every pair of sources in the
    contrasts, each difference with its sd."""
    zs, ct = zero_shot_losses(runs), contrasts(runs)
    closest: dict[str, dict] = {}
    for target in runs.pairs:
        mine = [e for e in zs if e["target"] == target]
        sizes = sorted({e["n"] for e in mine})
        best = {n: min((e for e in mine if e["n"] == n), key=lambda e: e["loss"])["source"]
                for n in sizes}
        if best and len(set(best.values())) == 1:
            src = next(iter(best.values()))
            others = sorted({e["source"] for e in mine} - {src})
            cmp = [c for o in others for c in compare_sources(zs, target, src, o)]
            closest[target] = {"source": src, "sizes": sizes,
                               "beyond_2sd_of_every_other": bool(cmp) and all(
                                   c["beyond_2sd"] for c in cmp)}
    ranked = []
    for target in runs.pairs:
        sources = sorted({e["source"] for e in ct if e["target"] == target})
        for a in sources:
            for b in sources:
                if a < b:
                    for c in compare_sources(ct, target, a, b):
                        if c["difference"] < 0:  # orient: better first
                            c = {**c, "better": b, "worse": a, "difference": -c["difference"],
                                 "beyond_2sd": bool(np.isfinite(c["sd"])
                                                    and -c["difference"] > 2 * c["sd"])}
                        ranked.append(c)
    return {"zero_shot": zs, "contrasts": ct, "closest_by_zero_shot": closest,
            "contrast_rankings": ranked}
