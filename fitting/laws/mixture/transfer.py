"""Transfer measured directly from the runs, beside the eq. 11 law's τ
(:func:`fitting.laws.mixture.compare.transfer_matrix`).

The law's τ is one parameter among many of a fit dominated by the steep losses near weight 0;
two measurements answer "who helps whom" without a law.

:func:`zero_shot_losses` and :func:`contrasts` measure it, :func:`compare_sources` ranks two
sources of a target with the seed noise (its docstring: which noise),
:func:`heldout_with_seed_noise` judges held-out mixture predictions against that noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

from fitting.core.uncertainty import beyond_sd
from fitting.laws.mixture.runs import MixtureRuns

__all__ = ["zero_shot_losses", "contrasts", "compare_sources", "direct_transfer",
           "pooled_seed_noise", "heldout_with_seed_noise"]

#: {(pair, N): relative seed sd}: :func:`pooled_seed_noise`'s result.
SeedNoise = Mapping[tuple[str, float], float]


def pooled_seed_noise(losses: Iterable[tuple[str, float, str, float]]
                      ) -> dict[tuple[str, float], dict]:
    """The seed noise of a pair's final loss at one size, pooled over mixtures.

    ``losses``: (pair, N, mixture, final loss) of runs trained with several seeds (one tuple per
    seed). Per (pair, N) the pooled relative sd
    s² = Σ_m Σ_s (y_ms / ȳ_m − 1)² / Σ_m (n_m − 1) over the mixtures m with n_m ≥ 2 seeds: the
    seed-to-seed sd as a fraction of the loss, assumed the same for every mixture at that size.
    Returns {(pair, N): {"relative_sd", "mixtures", "dof"}}; (pair, N) without two seeds of any
    mixture are absent."""
    groups: dict[tuple[str, float, str], list[float]] = {}
    for pair, n, mixture, y in losses:
        if np.isfinite(y) and y > 0:
            groups.setdefault((str(pair), float(n), str(mixture)), []).append(float(y))
    acc: dict[tuple[str, float], list[float]] = {}
    for (pair, n, _), ys in groups.items():
        if len(ys) >= 2:
            ys_arr = np.asarray(ys)
            ss = float(((ys_arr / ys_arr.mean() - 1.0) ** 2).sum())
            a = acc.setdefault((pair, n), [0.0, 0.0, 0.0])
            a[0] += ss
            a[1] += len(ys) - 1
            a[2] += 1
    return {k: {"relative_sd": float(np.sqrt(ss / dof)), "mixtures": int(m), "dof": int(dof)}
            for k, (ss, dof, m) in acc.items()}


def _noise_at(noise: SeedNoise | None, pair: str, n: float) -> float | None:
    """The pooled relative seed sd of ``pair`` at ``n`` (sizes compared to 1e-6 relative)."""
    for (p, size), rel in (noise or {}).items():
        if p == pair and np.isclose(size, n, rtol=1e-6):
            return float(rel)
    return None


def _pooled_at(seed_noise: Mapping[tuple[str, float], dict] | None, pair: str, n: float
               ) -> dict:
    """The :func:`pooled_seed_noise` entry of ``pair`` at ``n`` ({} where none)."""
    for (p, size), v in (seed_noise or {}).items():
        if p == pair and np.isclose(size, n, rtol=1e-6):
            return v
    return {}


def _mean_sd(runs: MixtureRuns, rows: np.ndarray, i: int, noise: SeedNoise | None = None
             ) -> tuple[float, float, str, int]:
    """Mean of pair i's loss over ``rows`` (seeds of one mixture and size), the sd of that mean
    and where it came from, and the number of runs."""
    y = runs.Y[rows, i]
    ok = np.isfinite(y)
    y = y[ok]
    if not len(y):
        return float("nan"), float("nan"), "none", 0
    if len(y) >= 2:
        return float(y.mean()), float(y.std(ddof=1) / np.sqrt(len(y))), "seed sd", len(y)
    rel = _noise_at(noise, runs.pairs[i], float(runs.n[rows[0]]))
    if rel is not None:
        return float(y[0]), float(rel * y[0]), "pooled seed sd", 1
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
    (w_j = 1), with its sd and noise source. (The pooled seed noise of trained losses is not
    used here: an untrained pair's loss varies with the seed far more.)"""
    out = []
    single = np.isclose(runs.W.max(axis=1), 1.0)
    for (_, n), rows in _groups(runs, single).items():
        j = int(np.argmax(runs.W[rows[0]]))
        for i, target in enumerate(runs.pairs):
            if i == j:
                continue
            mean, sd, source, count = _mean_sd(runs, rows, i)
            if count:
                out.append({"target": target, "source": runs.pairs[j], "n": n, "loss": mean,
                            "sd": sd, "noise": source, "runs": count})
    return out


def contrasts(runs: MixtureRuns, noise: SeedNoise | None = None) -> list[dict]:
    """One entry per (target i, own weight c, source j, size) for the runs with exactly two
    trained pairs, i at 0 < c ≤ 0.5 and the rest on j: L_i(c; j) with its sd and noise source
    (``noise``: :func:`pooled_seed_noise`'s relative sd per (pair, N), for one-seed runs).
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
            mean, sd, source, count = _mean_sd(runs, rows, int(i), noise)
            if count:
                out.append({"target": runs.pairs[i], "source": runs.pairs[j],
                            "weight": float(w[i]), "n": n, "loss": mean, "sd": sd,
                            "noise": source, "runs": count})
    return out


def compare_sources(entries: list[dict], target: str, better: str, worse: str) -> list[dict]:
    """Per size (and own weight, for contrasts): loss after ``worse`` minus loss after
    ``better`` for ``target`` (positive: ``better`` is the closer source), its sd and whether
    it is beyond 2 sd.

    * :func:`zero_shot_losses` — pair i's loss in the runs trained on one other pair j only
      (w_j = 1, w_i = 0): a model that never saw i's data scores far better on it after a related
      pair (shared lexicon, word order) than after an unrelated one. Lower = closer.
    * :func:`contrasts` — pair i at one weight c, the rest on a single source j (the design's
      transfer contrasts): L_i(c; j). Lower = j helps i more at equal own data.

    :func:`compare_sources` ranks two sources of a target by either measurement: the difference
    with its sd, sd² = sd_a² + sd_b², each the seed sd of the mean where a mixture has two seeds or
    more; for a one-seed run of a contrast, the study's pooled seed noise at that size where it was measured
    (:func:`pooled_seed_noise`: the relative seed sd of the pair over the mixtures trained with
    several seeds, e.g. the verification runs, times the run's loss), else the sd of the run's last 3
    evaluations (``noise`` says which: the last is a stand-in, not the seed noise: during a cool-down
    it measures the curve's fall); ``beyond_2sd`` when |difference| > 2 sd."""
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
                    "beyond_2sd": beyond_sd(diff, sd),
                    "noise": " and ".join(noise)})
    return out


def direct_transfer(runs: MixtureRuns, seed_noise: Mapping[tuple[str, float], dict] | None = None
                    ) -> dict:
    """``fits.json["mixture"]["transfer_direct"]``: the zero-shot losses and contrasts of
    ``runs``, and per target the source whose zero-shot loss is lowest at every size (its
    closest relative by this measure) and the ranking of every pair of sources in the
    contrasts, each difference with its sd. ``seed_noise``: :func:`pooled_seed_noise`'s result,
    the sd of one-seed runs at the sizes it covers (reported as ``seed_noise``)."""
    noise = {k: v["relative_sd"] for k, v in (seed_noise or {}).items()}
    zs, ct = zero_shot_losses(runs), contrasts(runs, noise)
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
                                 "beyond_2sd": beyond_sd(-c["difference"], c["sd"])}
                        ranked.append(c)
    return {"zero_shot": zs, "contrasts": ct, "closest_by_zero_shot": closest,
            "contrast_rankings": ranked,
            "seed_noise": [{"pair": p, "n": n, **v} for (p, n), v in sorted(
                (seed_noise or {}).items())]}


def heldout_with_seed_noise(heldout: Mapping[str, Mapping[str, dict]],
                            seed_noise: Mapping[tuple[str, float], dict] | None,
                            tolerance: float) -> tuple[dict, dict]:
    """The held-out mixture table (run → pair → entry with ``predicted``, ``measured``, ``n``)
    with each entry's relative error and, where :func:`pooled_seed_noise` covers its pair and
    size, its seed noise; and a summary (the ceiling: below). ``tolerance``: the
    relative tolerance of the held-out checks (the report passes
    :data:`fitting.report.sections.heldout.REL_TOLERANCE`, so both held-out tables use one).

    Entry fields added: ``relative_error`` = (predicted − measured) / measured; ``within_rel`` =
    |relative_error| ≤ ``tolerance``; where the seed noise is known: ``noise`` = σ · measured
    (``noise_source`` "pooled seed sd", with ``noise_seeds`` = the seeds pooled and
    ``noise_dof`` = their summed degrees of freedom) and ``p_within_exact`` = erf(tolerance / (σ √2)); else
    the entry's own noise stays, its source marked as not the seed noise.
    Summary: ``entries`` (every entry with a measured loss; a non-finite prediction counts as a
    miss), ``within`` (|relative error| ≤ tolerance), and over the
    entries with seed noise: ``with_seed_noise``, ``within_with_seed_noise``,
    ``expected_exact`` (Σ p_within_exact: an exact law's expected count) and
    ``within_3_seed_sd`` (|predicted − measured| ≤ 3 σ · measured).

    It judges the held-out mixture predictions against the same pooled
    seed noise: a one-seed held-out loss y scatters about its seed mean μ with relative sd σ, so even
    an exact law (predicting μ) lands within a relative tolerance t of y only with probability
    P(|y/μ − 1| ≤ t) = erf(t / (σ √2)); the sum over the entries is the count an exact law would
    reach — the ceiling of "within 2 %" that no law can beat on one-seed runs."""
    noise = {k: v["relative_sd"] for k, v in (seed_noise or {}).items()}
    out: dict[str, dict] = {}
    summary = {"tolerance": tolerance, "entries": 0, "within": 0, "with_seed_noise": 0,
               "within_with_seed_noise": 0, "expected_exact": 0.0, "within_3_seed_sd": 0}
    for run, pairs in heldout.items():
        out[run] = {}
        for pair, e in pairs.items():
            e = dict(e)
            pred, meas = float(e["predicted"]), float(e["measured"])
            if not (np.isfinite(meas) and meas > 0):
                out[run][pair] = e
                continue
            rel = (pred - meas) / meas  # NaN where the law gave no finite prediction: a miss
            e.update(relative_error=rel, within_rel=bool(np.isfinite(rel) and abs(rel) <= tolerance))
            summary["entries"] += 1
            summary["within"] += int(e["within_rel"])
            sigma = _noise_at(noise, pair, float(e["n"]))
            if sigma is not None and sigma > 0:
                p_exact = math.erf(tolerance / (sigma * math.sqrt(2.0)))
                pooled = _pooled_at(seed_noise, pair, float(e["n"]))
                e.update(noise=sigma * meas, noise_source="pooled seed sd",
                         noise_seeds=pooled["dof"] + pooled["mixtures"],
                         noise_dof=pooled["dof"], p_within_exact=p_exact)
                summary["with_seed_noise"] += 1
                summary["within_with_seed_noise"] += int(e["within_rel"])
                summary["expected_exact"] += p_exact
                summary["within_3_seed_sd"] += int(bool(abs(pred - meas) <= 3 * sigma * meas))
            elif e.get("noise_source") == "last 3 evaluations":
                e["noise_source"] = "last 3 evaluations (not the seed noise)"
            out[run][pair] = e
    return out, summary
