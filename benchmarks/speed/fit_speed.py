"""Speed of the fitting engines: the joint law (``--law joint``, the default) and the
Chinchilla form (``--law chinchilla``).

Joint law: the joint law (Fernandes eq. 7) for 2 pairs × 9 weights × 8 sizes with 100
perturbation refits must take under 5 s.

Measured in the same run for comparison: a direct fit of the same law without variable
projection (scipy ``least_squares`` with soft_l1 over all 10 parameters per pair, the same 30
α starts with β, L∞ initialised by a crude guess, f_scale fixed to the value our fit chose),
also with 100 perturbation refits; its wall time and its L∞ error are printed next to ours.
Wall time and process CPU time are both reported: on a shared machine (see the load average)
the CPU time is the load-independent number.

Chinchilla form (Caillaut eq. 2; Hoffmann et al.): ``fit_chinchilla`` on 9 public L(N, D) data
sets (72–276 points; see :func:`chinchilla_sets`), backtest off, in the same run: the default
(``init="auto"``), ``init="grid"`` (the published 4,500-start procedure) and ``init="varpro"``,
median seconds of ``--repeats`` fits each; whether the default reached the grid's optimum
(objective within 1e-9 relative; parameters within 1e-6); the PyPI peer ``chinchilla`` 0.2.0
on the same 4,500 starts (log-Huber δ = 1e-3, its own process pool, one fit) where it is
installed, on the ``--peer-sets`` (default all; minutes per fit); and bootstrap seconds
(``--bootstrap`` resamples): our batched refits against one ``refit`` call per resample (the
loop before the refits were batched). Medians over the data sets and per-set ratios are printed.

Usage (from the repository root):
    python benchmarks/speed/fit_speed.py [--repeats 3] [--json]
    python benchmarks/speed/fit_speed.py --law chinchilla [--data DIR] [--repeats 3] [--skip-peer]
        [--peer-sets NAME,...] [--bootstrap 100] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import DATA  # noqa: E402  (public data, see benchmarks/data/README.md)
from benchmarks.validation.validate_chinchilla import load_epoch, run_peer  # noqa: E402
from fitting.core.options import UncertaintyOptions
from fitting.laws.budget.chinchilla import fit_chinchilla  # noqa: E402
from fitting.laws.budget.chinchilla_opt import refit  # noqa: E402
from fitting.laws.size.joint import fit_joint_law  # noqa: E402
from fitting.laws.size.power import ALPHA_GRID  # noqa: E402
from fitting.test_utils import TRUTH, make_final_table  # noqa: E402


def direct_fit(df, f_scale: float, n_refits: int, seed: int) -> dict[str, float]:
    """Baseline: eq. 7 per pair by plain multi-start least_squares (no variable projection)."""
    rng = np.random.default_rng(seed)
    out = {}
    for pair, sub in df[df.weight > 0].groupby("pair"):
        n = sub.n.to_numpy(float)
        p = sub.weight.to_numpy(float)
        y = sub.value.to_numpy(float)
        ws = np.unique(p)
        onehot = (p[:, None] == ws[None, :]).astype(float)

        def resid(x, yy, n=n, onehot=onehot):
            return onehot @ x[1:-1] * n ** -x[0] + x[-1] - yy

        def fit(yy, starts, n=n, ws=ws):
            best = None
            for a0 in starts:
                b0 = np.full(ws.size, (yy.max() - 0.9 * yy.min()) * n.min() ** a0)
                x0 = np.concatenate([[a0], b0, [0.9 * yy.min()]])
                lo = np.concatenate([[1e-4], np.zeros(ws.size), [0.0]])
                hi = np.concatenate([[5.0], np.full(ws.size, np.inf), [np.inf]])
                s = least_squares(resid, x0, args=(yy,), bounds=(lo, hi), loss="soft_l1",
                                  f_scale=f_scale, max_nfev=2000)
                if best is None or s.cost < best.cost:
                    best = s
            return best.x

        x = fit(y, ALPHA_GRID)
        for _ in range(n_refits):
            fit(y * (1 + 0.01 * rng.standard_normal(y.size)), [x[0]])
        out[pair] = float(x[-1])
    return out


def run(repeats: int, n_refits: int) -> dict:
    df = make_final_table(noise=0.01, seed=0)
    assert df.weight.nunique() == 9 and df.n.nunique() == 8 and df.pair.nunique() == 2
    ours, ours_cpu, base = [], [], []
    fit = None
    for r in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fit = fit_joint_law(df, uncertainty=UncertaintyOptions(n_refits=n_refits, seed=r))
        ours.append(time.perf_counter() - t)
        ours_cpu.append(time.process_time() - c)
    fs = float(np.median(list(fit.f_scale.values())))
    t, c = time.perf_counter(), time.process_time()
    linf_base = direct_fit(df, fs, n_refits, 0)
    base.append(time.perf_counter() - t)
    base_cpu = time.process_time() - c
    err_ours = {p: abs(fit.params[f"l_inf[{p}]"] / TRUTH[p][2] - 1) for p in TRUTH}
    err_base = {p: abs(linf_base[p] / TRUTH[p][2] - 1) for p in TRUTH}
    return {
        "setting": "2 pairs × 9 weights × 8 sizes, 1% noise, soft_l1 + f_scale grid, "
                   f"{n_refits} perturbation refits",
        "ours_seconds": ours, "ours_best": min(ours), "ours_cpu_seconds": ours_cpu,
        "target_seconds": 5.0, "meets_target": min(ours) < 5.0,
        "meets_target_cpu": min(ours_cpu) < 5.0,
        "direct_least_squares_seconds": base[0], "direct_cpu_seconds": base_cpu,
        "speedup_vs_direct": base[0] / min(ours),
        "speedup_vs_direct_cpu": base_cpu / min(ours_cpu),
        "l_inf_rel_err_ours": err_ours, "l_inf_rel_err_direct": err_base,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpu",
        "python": platform.python_version(), "loadavg": list(os.getloadavg()),
    }


# -- Chinchilla form ---------------------------------------------------------------------------

#: Ye et al.'s mixtures used below: (mixture set, proportions, validation domains).
MIXINGLAWS_SETS = [
    ("3Mix", "0.25-0.25-0.5", ["Github", "Pile-CC", "Books3"]),
    ("RedPajama", "0.25-0.125-0.140625-0.125-0.1875-0.125-0.046875",
     ["Github", "Books3", "Pile-CC"]),
]
NAMES = ["E", "A", "B", "alpha", "beta"]


def chinchilla_sets(data: Path) -> tuple[dict[str, tuple], list[str]]:
    """The 9 public L(N, D) data sets found under ``data`` (name → n, d, loss) and the missing.

    - ``epoch``: Besiroglu et al. 2024 (Hoffmann et al. Fig. 4), the 5 highest losses dropped as
      they do (240 points);
    - ``datablations <= 4 epochs`` (97) and ``datablations loss < 6`` (276): Muennighoff et al.
      2023's runs, tokens ≤ 4 × unique tokens and validation loss below 6;
    - ``mixinglaws <set> <domain>``: Ye et al. 2024, one mixture each of 3Mix (N = 70M, 160M,
      410M; 233–240 points) and RedPajama (5 sizes, 72 points), loss on 3 validation domains
      along training; D = the training step (tokens per step are constant, B absorbs them),
      the rows at step "last" dropped.
    """
    sets: dict[str, tuple] = {}
    missing: list[str] = []
    epoch = data / "epoch_chinchilla" / "svg_extracted_data.csv"
    if epoch.exists():
        sets["epoch"] = load_epoch(epoch)
    else:
        missing.append(str(epoch))
    db = data / "datablations" / "data_constrained_val_losses.csv"
    if db.exists():
        df = pd.read_csv(db)
        for name, sub in (("datablations <= 4 epochs", df[df.tokens <= 4 * df.unique_tokens]),
                          ("datablations loss < 6", df[df.val_loss < 6])):
            sets[name] = tuple(sub[c].to_numpy(float) for c in ("params", "tokens", "val_loss"))
    else:
        missing.append(str(db))
    mix = data / "mixinglaws" / "mixing_losses_tidy.csv"
    if mix.exists():
        sets.update(_mixinglaws_sets(pd.read_csv(mix)))
    else:
        missing.append(str(mix))
    return sets, missing


def _mixinglaws_sets(df: pd.DataFrame) -> dict[str, tuple]:
    df = df[df.step.astype(str) != "last"]
    size = df.model_size.map(lambda s: float(s[:-1]) * {"M": 1e6, "B": 1e9}[s[-1]])
    out = {}
    for mixture_set, proportions, domains in MIXINGLAWS_SETS:
        for domain in domains:
            keep = ((df.mixture_set == mixture_set) & (df.proportions == proportions)
                    & (df.valid_domain == domain))
            out[f"mixinglaws {mixture_set} {domain}"] = (
                size[keep].to_numpy(float), df.step[keep].astype(float).to_numpy(),
                df.loss[keep].to_numpy(float))
    return out


def _timed(fn, *args, **kwargs) -> tuple[float, float, object]:
    t, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, time.process_time() - c, out


def _same_optimum(fit, ref) -> dict:
    f, g = fit.goodness["huber_objective"], ref.goodness["huber_objective"]
    rel = max(abs(fit.params[k] / ref.params[k] - 1) for k in NAMES)
    return {"objective_rel_diff": f / g - 1, "max_param_rel_diff": rel,
            "objective_reached": f <= g * (1 + 1e-9), "params_agree": rel <= 1e-6}


def _bootstrap_loop(fit, n, d, loss, n_boot: int, seed: int) -> float:
    """Seconds of one ``refit`` call per resample (the loop before refits were batched), from
    the fit's best local optima, on the resamples ``fit_chinchilla`` draws."""
    with np.errstate(divide="ignore"):  # a local optimum may sit at E, A or B = 0
        seeds = np.array([[np.log(o["A"]), np.log(o["B"]), np.log(o["E"]), o["alpha"],
                           o["beta"]] for o in fit.local_optima[:3]])
    seeds = seeds[np.isfinite(seeds).all(axis=1)]
    x, z, y = np.log(n), np.log(d), np.log(loss)
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    for _ in range(n_boot):
        idx = rng.integers(0, len(y), len(y))
        refit(seeds, x[idx], z[idx], y[idx], fit.delta, False)
    return time.perf_counter() - t


def chinchilla_one(n, d, loss, n_boot: int, peer: bool, repeats: int) -> dict:
    """One data set: default, grid and varpro fits (median seconds of ``repeats`` runs),
    bootstrap both ways, the peer if asked."""
    out: dict = {"points": int(len(loss))}
    fits = {}
    for init in ("auto", "grid", "varpro"):
        runs = [_timed(fit_chinchilla, n, d, loss, init=init, backtest=False)
                for _ in range(repeats)]
        wall, cpu = (float(np.median([r[i] for r in runs])) for i in (0, 1))
        fits[init] = runs[-1][2]
        out[init] = {"seconds": wall, "cpu_seconds": cpu, "repeats": repeats,
                     "params": fits[init].params,
                     "objective": fits[init].goodness["huber_objective"],
                     "path": fits[init].meta["init"],
                     "start_stats": fits[init].meta["start_stats"]}
    out["auto"]["init_reason"] = fits["auto"].meta["init_reason"]
    out["auto_vs_grid"] = _same_optimum(fits["auto"], fits["grid"])
    out["varpro_vs_grid"] = _same_optimum(fits["varpro"], fits["grid"])
    if n_boot:
        wall, cpu, fb = _timed(fit_chinchilla, n, d, loss, backtest=False, bootstrap=n_boot)
        out["bootstrap"] = {"n": n_boot, "fit_seconds": wall, "fit_cpu_seconds": cpu,
                            "batched_seconds": fb.meta["bootstrap"]["seconds"],
                            "loop_seconds": _bootstrap_loop(fb, n, d, loss, n_boot, 0)}
    if peer:
        out["peer"] = run_peer(n, d, loss, parallel=True)
        out["peer"]["vs_grid_max_param_rel_diff"] = max(
            abs(out["peer"]["params"][k] / fits["grid"].params[k] - 1) for k in NAMES)
    return out


def run_chinchilla(data: Path, n_boot: int, peer_sets: list[str] | None, repeats: int) -> dict:
    sets, missing = chinchilla_sets(data)
    res: dict = {"data": str(data), "missing": missing, "sets": {},
                 "loadavg_start": list(os.getloadavg())}
    for name, (n, d, loss) in sets.items():
        peer = peer_sets is not None and (not peer_sets or name in peer_sets)
        res["sets"][name] = chinchilla_one(n, d, loss, n_boot, peer, repeats)
        print(f"  {name}: done", file=sys.stderr, flush=True)
    res["summary"] = _chinchilla_summary(res["sets"])
    res["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpu"
    res["python"] = platform.python_version()
    res["loadavg_end"] = list(os.getloadavg())
    return res


def _chinchilla_summary(sets: dict) -> dict:
    def med(values):
        return float(np.median(values)) if len(values) else None

    rows = list(sets.values())
    out = {f"median_seconds_{k}": med([r[k]["seconds"] for r in rows])
           for k in ("auto", "grid", "varpro")}
    out.update({f"median_cpu_seconds_{k}": med([r[k]["cpu_seconds"] for r in rows])
                for k in ("auto", "grid", "varpro")})
    out["median_ratio_grid_over_auto"] = med([r["grid"]["seconds"] / r["auto"]["seconds"]
                                              for r in rows])
    out["auto_reached_grid_objective"] = sum(r["auto_vs_grid"]["objective_reached"] for r in rows)
    out["auto_params_agree_with_grid"] = sum(r["auto_vs_grid"]["params_agree"] for r in rows)
    out["auto_paths"] = {r: sets[r]["auto"]["path"] for r in sets}
    peer = [r for r in rows if "peer" in r]
    out["peer_sets"] = len(peer)
    out["median_seconds_peer"] = med([r["peer"]["wall_s"] for r in peer])
    out["median_ratio_peer_over_auto"] = med([r["peer"]["wall_s"] / r["auto"]["seconds"]
                                              for r in peer])
    out["median_ratio_peer_over_grid"] = med([r["peer"]["wall_s"] / r["grid"]["seconds"]
                                              for r in peer])
    boot = [r["bootstrap"] for r in rows if "bootstrap" in r]
    out["median_bootstrap_batched_seconds"] = med([b["batched_seconds"] for b in boot])
    out["median_bootstrap_loop_seconds"] = med([b["loop_seconds"] for b in boot])
    out["median_ratio_bootstrap_loop_over_batched"] = med(
        [b["loop_seconds"] / b["batched_seconds"] for b in boot])
    return out


def print_chinchilla(res: dict) -> None:
    print(f"fit_chinchilla on {len(res['sets'])} public L(N, D) data sets ({res['data']}); "
          f"missing: {res['missing'] or 'none'}")
    print(f"{'data set':30s} {'pts':>4s} {'auto s':>8s} {'grid s':>8s} {'varpro s':>8s} "
          f"{'grid/auto':>9s} {'peer s':>8s} {'peer/auto':>9s}  auto path; = grid optimum")
    for name, r in res["sets"].items():
        peer = r.get("peer", {}).get("wall_s")
        ps = f"{peer:8.1f} {peer / r['auto']['seconds']:8.0f}x" if peer else f"{'-':>8s} {'-':>9s}"
        ag = r["auto_vs_grid"]
        print(f"{name:30s} {r['points']:4d} {r['auto']['seconds']:8.3f} "
              f"{r['grid']['seconds']:8.2f} {r['varpro']['seconds']:8.3f} "
              f"{r['grid']['seconds'] / r['auto']['seconds']:8.1f}x {ps}  {r['auto']['path']}; "
              f"objective {ag['objective_rel_diff']:+.1e}, params {ag['max_param_rel_diff']:.1e}")
        if "bootstrap" in r:
            b = r["bootstrap"]
            print(f"{'':30s} bootstrap {b['n']}: batched {b['batched_seconds']:.2f} s, one refit "
                  f"per resample {b['loop_seconds']:.2f} s; whole fit {b['fit_seconds']:.2f} s")
    s = res["summary"]
    print(f"median seconds per fit: default {s['median_seconds_auto']:.3f}, grid "
          f"{s['median_seconds_grid']:.2f}, varpro {s['median_seconds_varpro']:.3f}"
          + (f", peer {s['median_seconds_peer']:.1f} ({s['peer_sets']} sets)"
             if s["peer_sets"] else "")
          + f"; CPU: default {s['median_cpu_seconds_auto']:.3f}, grid "
          f"{s['median_cpu_seconds_grid']:.2f}, varpro {s['median_cpu_seconds_varpro']:.3f}")
    print(f"default reached the grid's objective on {s['auto_reached_grid_objective']} of "
          f"{len(res['sets'])} sets (parameters within 1e-6 on {s['auto_params_agree_with_grid']}); "
          f"median grid/default {s['median_ratio_grid_over_auto']:.1f}x"
          + (f", peer/default {s['median_ratio_peer_over_auto']:.0f}x, peer/grid "
             f"{s['median_ratio_peer_over_grid']:.0f}x" if s["peer_sets"] else ""))
    if s["median_bootstrap_loop_seconds"] is not None:
        print(f"bootstrap: median batched {s['median_bootstrap_batched_seconds']:.2f} s, one "
              f"refit per resample {s['median_bootstrap_loop_seconds']:.2f} s (median ratio "
              f"{s['median_ratio_bootstrap_loop_over_batched']:.1f}x)")
    print(f"machine: {res['machine']}, python {res['python']}, load average "
          f"{res['loadavg_start']} -> {res['loadavg_end']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--law", choices=["joint", "chinchilla"], default="joint")
    ap.add_argument("--repeats", type=int, default=3,
                    help="repeats of our fits (joint: best of; chinchilla: median of)")
    ap.add_argument("--n-refits", type=int, default=100, help="joint: perturbation refits")
    ap.add_argument("--data", type=Path, default=DATA,
                    help="chinchilla: folder with epoch_chinchilla/, datablations/, mixinglaws/ "
                         "(only datablations is vendored; see benchmarks/data/README.md)")
    ap.add_argument("--bootstrap", type=int, default=100, help="chinchilla: resamples (0: none)")
    ap.add_argument("--skip-peer", action="store_true", help="chinchilla: no PyPI `chinchilla`")
    ap.add_argument("--peer-sets", default="",
                    help="chinchilla: comma-separated data set names for the peer (default all)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.law == "chinchilla":
        main_chinchilla(a, ap)
        return
    res = run(a.repeats, a.n_refits)
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(res["setting"])
    print(f"ours (varpro engine): wall best {res['ours_best']:.2f} s of "
          f"{[round(x, 2) for x in res['ours_seconds']]}, CPU "
          f"{[round(x, 2) for x in res['ours_cpu_seconds']]} s  (target < 5 s: wall "
          f"{'met' if res['meets_target'] else 'NOT met'}, CPU "
          f"{'met' if res['meets_target_cpu'] else 'NOT met'})")
    print(f"direct least_squares baseline: wall {res['direct_least_squares_seconds']:.2f} s, CPU "
          f"{res['direct_cpu_seconds']:.2f} s (ours is {res['speedup_vs_direct']:.1f}× faster "
          f"wall, {res['speedup_vs_direct_cpu']:.1f}× CPU)")
    print(f"L∞ relative error: ours {res['l_inf_rel_err_ours']}, direct {res['l_inf_rel_err_direct']}")
    print(f"machine: {res['machine']}, python {res['python']}, load average {res['loadavg']}")


def main_chinchilla(a: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    peer_sets = None
    if not a.skip_peer:
        try:
            import chinchilla  # noqa: F401
        except ImportError:
            ap.error("the peer library is not installed: pip install -c "
                     "requirements/constraints.txt -e '.[bench]' (pins chinchilla==0.2.0), "
                     "or pass --skip-peer")
        peer_sets = [x.strip() for x in a.peer_sets.split(",") if x.strip()]
    res = run_chinchilla(a.data, a.bootstrap, peer_sets, a.repeats)
    if not res["sets"]:
        ap.error(f"no data set found under {a.data}: {res['missing']}")
    if a.json:
        print(json.dumps(res, indent=1, default=float))
    else:
        print_chinchilla(res)


if __name__ == "__main__":
    main()
