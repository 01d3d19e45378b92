"""Schedule-aware curve laws on a study's own runs: predict each cool-down branch's end.

For every parent run with cool-down branches (``runs/<run>_cdNNN``) and every pair it trains,
a law (LR-annealing, Tissue et al. 2024 eq. 1; Multi-Power, Luo et al. 2025) is fitted on the
parent's curve and predicts each branch's cooled-down end
(:func:`fitting.laws.curves.branches.predict_branch_ends`). Variants (one line each: tested
ends, median and worst |relative error|, mean signed error):

* fit set: ``stable`` = the parent up to the start of its own cool-down ((1 − cooldown_fraction)
  · train_steps, from OUT/study.json), its end then a test too; ``parent`` = all of it (its own
  cool-down included); ``middle`` = stable + the middle branch;
* loss: ``train`` the training loss of the pair (each row the mean over its window,
  ``Curve.window``), ``train-nowin`` the same read as the loss at its step, ``val`` the
  validation loss, ``train>val`` fitted on training, judged on validation with the offset,
  ``nowin>val`` fitted on ``train-nowin``, judged on validation (``+offset``: with it);
  ``probe`` the pair's probe loss (``probe_loss`` rows, where the study probed: the same
  examples at every probe step), fitted and judged on it (the report's setting for such tables);
* form: variants named ``*-rel-*`` fit the relative form of the annealing law,
  (L0 + A·S1^−α)·exp(−C·S2) (:mod:`fitting.laws.curves.annealing`; the report's default);
* λ of the annealing area; the first step fitted.

The seed noise of the cooled ends (runs repeated with another seed: relative sd of their
validation-loss ends) is printed for the 3 × seed noise yardstick.

Usage (from the repository root):
    nice python benchmarks/studies/curve_laws_main_job.py OUT [--details VARIANT] [--laws ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.common import machine  # noqa: E402
from fitting.data.rundirs import collect_runs  # noqa: E402
from fitting.laws.curves.branches import BranchPredictions, predict_branch_ends  # noqa: E402
from fitting.laws.curves.joint_fit import CurveFitOptions  # noqa: E402
from fitting.laws.curves.runs import Curve, curves_from_table  # noqa: E402

#: (name, law, fit set, loss, λ or None, first step fitted)
VARIANTS = [
    ("probe", "lr_annealing", "stable", "train-nowin", 0.999, 200),
    ("stable", "lr_annealing", "stable", "train", 0.999, 400),
    ("stable-l0.8", "lr_annealing", "stable", "train", 0.8, 400),
    ("parent", "lr_annealing", "parent", "train", 0.999, 400),
    ("parent-l0.9", "lr_annealing", "parent", "train", 0.9, 400),
    ("parent-l0.8", "lr_annealing", "parent", "train", 0.8, 400),
    ("parent-l0.8-nowin", "lr_annealing", "parent", "train-nowin", 0.8, 400),
    ("parent-l0.8-val", "lr_annealing", "parent", "val", 0.8, 400),
    ("parent-l0.8-train>val", "lr_annealing", "parent", "train>val", 0.8, 400),
    ("middle-l0.8", "lr_annealing", "middle", "train", 0.8, 400),
    ("middle-l0.8-nowin", "lr_annealing", "middle", "train-nowin", 0.8, 400),
    ("middle-l0.8-val", "lr_annealing", "middle", "val", 0.8, 400),
    ("middle-l0.8-train>val", "lr_annealing", "middle", "train>val", 0.8, 400),
    ("middle-rel-l0.8-nowin", "lr_annealing", "middle", "train-nowin", 0.8, 400),
    ("middle-rel-l0.8-nowin>val", "lr_annealing", "middle", "nowin>val", 0.8, 400),
    ("middle-rel-l0.8-nowin>val-offset", "lr_annealing", "middle", "nowin>val+offset", 0.8,
     400),
    ("middle-rel-l0.8-probe", "lr_annealing", "middle", "probe", 0.8, 400),
    ("mpl-parent", "multi_power", "parent", "train", None, 400),
    ("mpl-middle", "multi_power", "middle", "train", None, 400),
    ("mpl-middle-train>val", "multi_power", "middle", "train>val", None, 400),
]


def load_table(out: Path) -> pd.DataFrame:
    """OUT/metrics.csv, or the finished run directories' rows when there is none yet."""
    if (out / "metrics.csv").exists():
        return pd.read_csv(out / "metrics.csv")
    dirs = sorted(str(d) for d in (out / "runs").iterdir() if (d / "metrics.jsonl").exists())
    return collect_runs(dirs)


def pair_curves(df: pd.DataFrame, **kw) -> dict[str, dict[str, Curve]]:
    """{pair: {run: curve}} over the runs that train the pair (weight > 0)."""
    trained = df[(df["metric"] == "train_loss") & (df["pair"] != "all")]
    out = {}
    for pair, rows in trained.groupby("pair"):
        runs = set(rows["run_id"])
        out[pair] = curves_from_table(df[df["run_id"].isin(runs)], pair=pair, **kw)
    return out


def complete(curves: dict[str, Curve], n_branches: int) -> dict[str, Curve]:
    """Only families whose branches all finished."""
    count: dict[str, int] = {}
    for c in curves.values():
        if c.parent:
            count[c.parent] = count.get(c.parent, 0) + 1
    ok = {p for p, k in count.items() if k >= n_branches}
    return {r: c for r, c in curves.items() if (c.parent or r) in ok}


def run_variant(sets: dict, variant: tuple, stable_until: float) -> list[BranchPredictions]:
    _, law, fit_set, loss, lam, start = variant
    src = {"train": "train", "train-nowin": "nowin", "val": "val", "train>val": "train",
           "nowin>val": "nowin", "nowin>val+offset": "nowin", "probe": "probe"}[loss]
    kw = {"lam": lam} if lam is not None else {}
    if "-rel-" in variant[0]:  # the relative form of the annealing law
        kw["form"] = "relative"
    res = []
    for pair in sets["train"]:
        res.append(predict_branch_ends(
            sets[src][pair], law=law, options=CurveFitOptions(from_step=start),
            stable_until=None if fit_set == "parent" else stable_until,
            fit_branches="middle" if fit_set == "middle" else (),
            targets=sets["val"][pair] if ">val" in loss else None,
            offset=loss in ("train>val", "nowin>val+offset"), law_params=kw))
    return res


def summary(results: list[BranchPredictions]) -> dict:
    e = np.array([x.error for r in results for x in r.tested()])
    return {"n": int(e.size), "rmse": float(np.sqrt(np.mean(e ** 2))),
            "median_abs": float(np.median(np.abs(e))),
            "worst_abs": float(np.max(np.abs(e))), "mean": float(np.mean(e)),
            "failed": sum(len(r.failed) for r in results)}


def seed_noise(sets: dict) -> dict[str, float]:
    """Relative sd of the validation-loss ends of runs that differ only by their seed
    (run ids ``..._s<k>``, branches included): {size/mixture/branch: sd / mean}."""
    groups: dict[str, list[float]] = {}
    for curves in sets["val"].values():
        for run, c in curves.items():
            if not c.steps.size:
                continue
            head, _, tail = run.partition("_s")
            key = head + "_s*" + tail.partition("_")[1] + tail.partition("_")[2]
            groups.setdefault(key, []).append(float(c.loss[-1]))
    return {k: float(np.std(v, ddof=1) / np.mean(v)) for k, v in groups.items() if len(v) > 1}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="the study's output directory (OUT/metrics.csv or OUT/runs)")
    ap.add_argument("--details", default="middle-l0.8-train>val",
                    help="variant whose ends are listed one by one")
    ap.add_argument("--laws", default="lr_annealing,multi_power")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    spec = json.loads((out / "study.json").read_text())
    stable_until = (1.0 - spec["cooldown_fraction"]) * spec["train_steps"]
    n_branches = len(spec["cooldown_branches"])
    df = load_table(out)
    sets = {"train": pair_curves(df, loss_metric="train_loss"),
            "nowin": pair_curves(df, loss_metric="train_loss", loss_window=0),
            "val": pair_curves(df, loss_metric="loss", eval_set=spec["eval_sets"][0])}
    if (df["metric"] == "probe_loss").any():  # a study with probe evaluations
        sets["probe"] = pair_curves(df, loss_metric="probe_loss")
    for k in sets:
        sets[k] = {p: complete(c, n_branches) for p, c in sets[k].items()}
    laws = set(args.laws.split(","))
    report: dict = {"machine": machine(), "study": str(out), "stable_until": stable_until,
                    "seed_noise": seed_noise(sets), "variants": {}}
    print(f"# {out}: stable phase <= step {stable_until:g}; families: "
          + ", ".join(f"{p}: {sum(1 for c in cs.values() if not c.parent)}"
                      for p, cs in sets["train"].items()))
    sn = report["seed_noise"]
    if sn:
        print(f"# seed noise of cooled validation ends (relative sd): median "
              f"{100 * np.median(list(sn.values())):.2f} %, max {100 * max(sn.values()):.2f} % "
              f"over {len(sn)} repeated ends")
    details = None
    for v in VARIANTS:
        if v[1] not in laws or (v[3] == "probe" and "probe" not in sets):
            continue
        t0 = time.perf_counter()
        res = run_variant(sets, v, stable_until)
        s = summary(res)
        report["variants"][v[0]] = s
        if v[0] == args.details:
            details = res
        print(f"{v[0]:24s} n={s['n']:3d}  rmse {100 * s['rmse']:6.2f} %  median {100 * s['median_abs']:6.2f} %  worst "
              f"{100 * s['worst_abs']:6.2f} %  mean {100 * s['mean']:+6.2f} %  "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if details is not None:
        print(f"\n# {args.details}: predicted vs trained ends")
        rows = []
        for r in details:
            for e in r.ends:
                rows.append({"run": e.run, "step": e.step, "measured": e.measured,
                             "predicted": e.predicted, "error_%": 100 * e.error,
                             "fitted": e.fitted})
                print(f"{e.run:32s} {e.step:6.0f} measured {e.measured:.4f} predicted "
                      f"{e.predicted:.4f} {100 * e.error:+7.2f} %{'  (fitted)' if e.fitted else ''}")
        report["details"] = {args.details: rows}
    if args.json:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
