"""`mnmt-fit mixture` on wide tables of runs: seconds, cross-validated and held-out error.

Per table: rows (runs), pairs (domains with a weight), sizes, seconds of the whole command
(`python -m fitting.cli mixture TABLE --json`: the four laws, cross-validation over design
mixtures, the bootstrap, the recommendation), the chosen law, its CV and held-out mean relative
error (MRE = 100 · mean |L̂ − L| / L, the metric Shukor et al. 2025 report: about 1–2 %) and
Spearman ρ between predicted and measured losses over the held-out mixtures (per evaluated
domain, then the mean; over all held-out runs and per size).

Tables:

* ``mixinglaws-3Mix-410M`` — Ye et al. 2024's 3-domain Pile mixtures at 410M parameters, final
  step (../shared/data/mixinglaws, no licence stated: read from there, never copied; the
  domain order inside the proportions is inferred as benchmarks/validation/validate_mixinglaws.py does);
  20 % of the mixtures held out (seeded).
* ``regmix-1M`` — RegMix's own split at 1M (the anchor's: its regression notebook fits the 512
  training mixtures and reports Spearman ρ on the 256 test mixtures, all held out here).
* ``regmix-1M-60M`` — RegMix (Liu et al. 2024, github sail-sg/regmix @ b004d3a, MIT licence;
  its ``data/*.csv`` read from the folder given by ``--regmix``, not vendored): 512 training
  mixtures at 1M parameters and 256 test mixtures at 1M and at 60M, 17 Pile domains of which 13
  are evaluated (4 weight-only), plus the 64 test mixtures at 1B as held-out runs; 20 % of the
  test mixtures held out at both sizes (seeded). Sizes N taken as the names say (1e6, 6e7, 1e9);
  ``tokens`` 1B per run, 25B for the 1B models (no fitted run differs in D, so no law can carry
  it: the 1B predictions extrapolate in N and D).
* ``generated-joint-800`` — 800 runs × 13 domains × 3 sizes from a known ``joint`` law
  (Shukor et al. 2025's form, seeded parameters), 0.3 % relative noise, 10 % of the mixtures
  held out at every size; 2 domains weight-only (trained, never evaluated).

Usage (from the repository root; time it alone on the machine):
    python benchmarks/speed/mixture_tables.py [--json] [--data DIR] [--n-boot 20] [--workers N]
        [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import ROOT, SHARED_DATA, machine  # noqa: E402
from fitting.data.sampling import dirichlet_mixtures  # noqa: E402
from fitting.laws.mixture.laws import MixtureLawFit  # noqa: E402

SHARED = SHARED_DATA / "mixinglaws"
#: the anchors' own numbers, to set beside the tables'
ANCHORS = {
    "shukor2025": "Shukor et al. 2025 report about 1-2 % mean relative error of their laws",
    "regmix-1M": "RegMix's regression notebook (regression_fitting/regression.ipynb @ b004d3a): "
                 "LightGBM fitted on the 512 training mixtures at 1M, Spearman rho on the 256 "
                 "test mixtures at 1M per evaluated domain 96.87-99.77 %, mean 98.95 % "
                 "(Pile-CC 98.92 %)",
}


def mixinglaws_wide(data_dir: Path, mixture_set: str = "3Mix", model_size: str = "410M",
                    held_frac: float = 0.2, seed: int = 0) -> pd.DataFrame:
    """Ye et al.'s runs of one mixture set and size as a wide table at the step most runs
    reached; ``held_frac`` of the mixtures held out."""
    from validate_mixinglaws import infer_order, load

    wide, domains, _ = load(str(data_dir), mixture_set, model_size)
    order = infer_order(wide, domains)
    out = pd.DataFrame({"run_id": wide.run_id.astype(str), "n": 1.0})
    for j, dom in enumerate(order):
        out[f"w_{dom}"] = wide[f"r_{j}"].to_numpy(float)
        out[f"loss_{dom}"] = wide[dom].to_numpy(float)
    w = out[[f"w_{d}" for d in order]].to_numpy()
    for c, col in zip(w.T, order, strict=True):
        out[f"w_{col}"] = c / w.sum(axis=1)
    rng = np.random.default_rng(seed)
    out["heldout"] = (rng.permutation(len(out)) < round(held_frac * len(out))).astype(int)
    return out


def _regmix_part(folder: Path, mix: str, loss: str, n: float, tag: str) -> pd.DataFrame:
    """One of RegMix's (mixture, loss) CSV pairs as wide rows (weights renormalised)."""
    w = pd.read_csv(folder / mix).set_index("index")
    y = pd.read_csv(folder / loss).set_index("index")
    w.columns = ["w_" + c.removeprefix("train_the_pile_") for c in w.columns]
    y.columns = ["loss_" + c.removeprefix("metric/the_pile_").removesuffix("_val_loss")
                 for c in y.columns]
    df = w.join(y, how="inner")
    wc = [c for c in df if c.startswith("w_")]
    df[wc] = df[wc].div(df[wc].sum(axis=1), axis=0)
    return df.assign(run_id=[f"{tag}{i}" for i in df.index], n=n, mix=df.index)


def _regmix_columns(out: pd.DataFrame) -> pd.DataFrame:
    return out[["run_id", "n", "heldout"] + (["tokens"] if "tokens" in out else [])
               + [c for c in out if c.startswith(("w_", "loss_"))]]


def regmix_wide(folder: Path, held_frac: float = 0.2, seed: int = 0) -> pd.DataFrame:
    """RegMix's runs as one wide table (module docstring)."""
    rng = np.random.default_rng(seed)
    train = _regmix_part(folder, "train_mixture_1m.csv", "train_pile_loss_1m.csv", 1e6,
                         "train1m_").assign(heldout=0)
    t1 = _regmix_part(folder, "test_mixture_1m.csv", "test_pile_loss_1m.csv", 1e6, "test1m_")
    t60 = _regmix_part(folder, "test_mixture_60m.csv", "test_pile_loss_60m.csv", 6e7, "test60m_")
    held = set(rng.choice(t1.mix.unique(), round(held_frac * t1.mix.nunique()), replace=False))
    t1["heldout"] = t1.mix.isin(held).astype(int)
    t60["heldout"] = t60.mix.isin(held).astype(int)
    t1b = _regmix_part(folder, "test_mixture_1B.csv", "test_pile_loss_1B.csv", 1e9,
                       "test1b_").assign(heldout=1, tokens=2.5e10)
    out = pd.concat([train, t1, t60, t1b], ignore_index=True).drop(columns="mix")
    return _regmix_columns(out.fillna({"tokens": 1e9}))


def regmix_1m(folder: Path) -> pd.DataFrame:
    """RegMix's own split at 1M: its 512 training mixtures fitted, its 256 test mixtures all
    held out (the split of its regression notebook, the anchor's)."""
    train = _regmix_part(folder, "train_mixture_1m.csv", "train_pile_loss_1m.csv", 1e6,
                         "train1m_").assign(heldout=0)
    test = _regmix_part(folder, "test_mixture_1m.csv", "test_pile_loss_1m.csv", 1e6,
                        "test1m_").assign(heldout=1)
    return _regmix_columns(pd.concat([train, test], ignore_index=True).drop(columns="mix"))


def joint_truth(k: int = 13, sizes=(2e7, 6e7, 2e8), seed: int = 0) -> MixtureLawFit:
    """A ``joint`` law of seeded parameters for ``k`` domains: loss L_i = E_i +
    1/(w_i^γ + Σ c_ij w_j^γ)·s_i + Σ_j a_ij w_j (N/N_ref)^−α_i, 2–4 nats in the design."""
    rng = np.random.default_rng(seed)
    pairs = [f"d{i:02d}" for i in range(k)]
    sol = {}
    for i, p in enumerate(pairs):
        c = 0.05 + rng.uniform(0.0, 0.5, k - 1) * (rng.random(k - 1) < 0.3)
        a = np.full(k, 0.3)
        a[i] = rng.uniform(0.6, 1.0)
        sol[p] = {"theta": [rng.uniform(0.25, 0.4), rng.uniform(0.3, 0.6)] + list(c),
                  "coef": [rng.uniform(1.6, 2.2), rng.uniform(0.05, 0.12)] + list(a),
                  "f_scale": 0.01}
    n_ref = float(np.exp(np.mean(np.log(sizes))))
    return MixtureLawFit(law="mixture", params={}, form="joint", pairs=pairs,
                         sizes=list(sizes), n_ref=n_ref, solutions=sol)


def generated_wide(n_runs: int = 800, k: int = 13, weight_only: int = 2, noise: float = 0.003,
                   held_frac: float = 0.1, seed: int = 1) -> pd.DataFrame:
    """``n_runs`` runs of :func:`joint_truth` (mixtures at every size), the last
    ``weight_only`` domains without a loss column."""
    truth = joint_truth(k)
    sizes = truth.sizes
    n_mix = -(-n_runs // len(sizes))
    Wm = dirichlet_mixtures(k, n_mix, seed=seed, concentration=1.0)
    n = np.repeat(sizes, n_mix)
    W = np.tile(Wm, (len(sizes), 1))
    rng = np.random.default_rng(seed)
    Y = truth.predict(n, W) * (1 + noise * rng.standard_normal(W.shape))
    held = np.tile(rng.random(n_mix) < held_frac, len(sizes))
    out = pd.DataFrame({"run_id": [f"r{j}" for j in range(len(n))], "n": n,
                        "heldout": held.astype(int)})
    for i, p in enumerate(truth.pairs):
        out[f"w_{p}"] = W[:, i]
        if i < k - weight_only:
            out[f"loss_{p}"] = Y[:, i]
    return out


def _spearman(payload: dict, size: str | None = None) -> float | None:
    """Mean over evaluated domains of Spearman ρ between predicted and measured losses of the
    held-out runs (of one size, ``f"{n:.3g}"``, or all)."""
    rho = []
    pairs = sorted({p for d in payload["heldout"].values() for p in d})
    for p in pairs:
        v = np.array([(d[p]["predicted"], d[p]["measured"]) for d in payload["heldout"].values()
                      if p in d and (size is None or f"{d[p]['n']:.3g}" == size)])
        if len(v) >= 3 and np.all(np.isfinite(v)):
            rho.append(spearmanr(v[:, 0], v[:, 1]).statistic)
    return float(np.mean(rho)) if rho else None


def score(wide: pd.DataFrame, payload: dict) -> dict:
    """Chosen law's CV and held-out MRE and Spearman ρ over the held-out mixtures (all held-out
    runs, and per size: across sizes ρ mostly ranks the sizes)."""
    law = payload["chosen"]
    e = payload["laws"][law]
    by_size: dict[str, list[float]] = {}
    for d in payload["heldout"].values():
        for v in d.values():
            if np.isfinite(v["predicted"]):
                by_size.setdefault(f"{v['n']:.3g}", []).append(abs(v["error"]) / v["measured"])
    return {"chosen": law, "cv": e.get("cv"), "cv_mre": e["cv_mape"],
            "heldout_mre_by_size": {n: 100 * float(np.mean(v)) for n, v in by_size.items()},
            "heldout_mre": e["heldout_mape"], "heldout_points": e["heldout_points"],
            "heldout_not_predicted": e.get("heldout_not_predicted"),
            "spearman_rho": _spearman(payload),
            "spearman_rho_by_size": {n: _spearman(payload, n) for n in by_size},
            "cv_failed": {f: v.get("cv_failed") for f, v in payload["laws"].items()},
            "boot_failed": {f: v.get("boot_failed") for f, v in payload["laws"].items()},
            "laws": {f: {"cv_mre": v["cv_mape"], "heldout_mre": v["heldout_mape"]}
                     for f, v in payload["laws"].items()}}


def run_table(name: str, wide: pd.DataFrame, n_boot: int, workers: int | None) -> dict:
    """`python -m fitting.cli mixture` on ``wide`` (written to a temporary CSV), timed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.csv")
        wide.to_csv(path, index=False)
        cmd = [sys.executable, "-m", "fitting.cli", "mixture", path, "--json", "--n-boot",
               str(n_boot)] + ([] if workers is None else ["--workers", str(workers)])
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"table": name, "error": proc.stderr[-2000:], "seconds": seconds}
    payload = json.loads(proc.stdout)
    sizes = sorted(set(wide["n"]))
    return {"table": name, "rows": len(wide), "pairs": sum(c.startswith("w_") for c in wide),
            "evaluated": sum(c.startswith("loss_") for c in wide), "sizes": len(sizes),
            "heldout_runs": int(wide["heldout"].sum()), "n_boot": n_boot,
            "seconds": round(seconds, 1), "progress_lines": proc.stderr.count("\n"),
            **score(wide, payload)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED), help="folder of mixing_losses_tidy.csv")
    ap.add_argument("--regmix", help="folder of RegMix's data/*.csv (github sail-sg/regmix)")
    ap.add_argument("--n-boot", type=int, default=20)
    ap.add_argument("--workers", type=int)
    ap.add_argument("--only", help="run only the table of this name")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tables = {}
    if os.path.exists(os.path.join(args.data, "mixing_losses_tidy.csv")):
        tables["mixinglaws-3Mix-410M"] = lambda: mixinglaws_wide(Path(args.data))
    if args.regmix:
        tables["regmix-1M"] = lambda: regmix_1m(Path(args.regmix))
        tables["regmix-1M-60M"] = lambda: regmix_wide(Path(args.regmix))
    tables["generated-joint-800"] = generated_wide
    rows = []
    for name, make in tables.items():
        if args.only and name != args.only:
            continue
        rows.append(run_table(name, make(), args.n_boot, args.workers))
        if not args.json:
            print(json.dumps(rows[-1]), flush=True)
    out = {**machine({"platform": "machine", "cpus": "cpus"}), "tables": rows, "anchors": ANCHORS}
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
