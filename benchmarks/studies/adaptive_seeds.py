"""The adaptive default judged on vocabulary seeds: each grown live beside its finished fixed grid.

For each finished main-job study GRID (any vocabulary seed), an adaptive study of the same seed
(`StudySpec.adaptive`, with the bindings given) is grown in OUT/<grid name>: GRID's data and run
directories are copied in first, so a run the design picks from the grid is found finished (the
same run the adaptive study would train: same configuration, seed and data), and only what the
grid lacks — the `adaptive_sizes` runs — trains. Then one Markdown table: per seed, the FLOPs
spent (of the grid's), the target pair's E with its 95 % interval against the exact L∞ (inside?
half-width of log E ≤ the threshold?), and the held-out run's error per pair within 3σ_seed —
beside the grid's own report on the same seed.

    python benchmarks/studies/adaptive_seeds.py GRID... --out DIR [--gin BINDING ...] [--json]

A seed whose adaptive study already has a report is not re-run. Exit status 0 when every seed
ran, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

from mnmt.study import adaptive

#: the frozen adaptive default judged here (chosen on vocabulary seed 0)
DEFAULT_BINDINGS = ("StudySpec.adaptive=True", "StudySpec.adaptive_sizes=('mini-2',)")


def grow_beside(grid: Path, out: Path, bindings: list[str]) -> Path:
    """The adaptive study of ``grid``'s seed in ``out`` (the grid's runs copied in first)."""
    if not (out / "report" / "fits.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        for part in ("data", "runs"):
            if not (out / part).exists():
                shutil.copytree(grid / part, out / part)
        seed = json.loads((grid / "study.json").read_text()).get("vocab_seed", 0)
        cmd = [str(Path(sys.executable).with_name("mnmt-study")), "run", "--out", str(out),
               "--gin", f"StudySpec.vocab_seed={seed}"]
        for binding in bindings:
            cmd += ["--gin", binding]
        with open(out.with_suffix(".log"), "w", encoding="utf-8") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return out


def summary(study: Path, pair: str) -> dict:
    """E's interval against the truth and the held-out errors of one study's report."""
    fits = json.loads((study / "report" / "fits.json").read_text())
    truth = fits["ground_truth"]
    e = (((fits.get("chinchilla") or {}).get("joint") or {}).get("meta") or {}).get(
        "E_predictive", {}).get(pair, {})
    held = {h["pair"]: {"error": h["error"], "within": bool(h.get("within_noise"))}
            for h in fits.get("heldout") or [] if h.get("primary")}
    lo, hi = e.get("lo95"), e.get("hi95")
    return {"truth": truth[pair], "E": e.get("estimate"), "lo95": lo, "hi95": hi,
            "relative": math.log(hi / lo) / 2 if lo and hi else None,
            "inside": bool(lo and hi and lo <= truth[pair] <= hi), "heldout": held}


def spent(study: Path) -> float | None:
    """The adaptive study's FLOPs as a share of its grid's (None for a fixed grid)."""
    records = adaptive.read_rounds(study)
    return records[-1]["spent"] / records[-1]["budget"] if records else None


def row(name: str, s: dict, share: float | None, threshold: float) -> str:
    e = "none" if s["lo95"] is None else (f"{s['E']:.4g} [{s['lo95']:.4g}, {s['hi95']:.4g}] "
                                          f"±{s['relative']:.1%}")
    narrow = "–" if s["relative"] is None else ("yes" if s["relative"] <= threshold else "no")
    held = "; ".join(f"{p} {h['error']:+.1%} {'within' if h['within'] else 'beyond'}"
                     for p, h in sorted(s["heldout"].items()))
    return (f"| {name} | {'100 %' if share is None else f'{share:.0%}'} | {e} | "
            f"{'yes' if s['inside'] else 'no'} | {narrow} | {held} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("grids", nargs="+", type=Path, help="finished main-job studies")
    ap.add_argument("--out", type=Path, required=True, help="folder of the adaptive studies")
    ap.add_argument("--gin", action="append", default=None,
                    help=f"StudySpec bindings (default: {' '.join(DEFAULT_BINDINGS)})")
    ap.add_argument("--pair", default="en-de", help="the target pair (default: %(default)s)")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="the half-width of log E judged (default: %(default)g)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    bad = [g for g in args.grids if not (g / "report" / "fits.json").exists()]
    if bad:
        print(f"{bad[0]}: not a finished study (no report/fits.json)", file=sys.stderr)
        return 2
    bindings = list(args.gin or DEFAULT_BINDINGS)
    results = []
    for grid in args.grids:
        grown = grow_beside(grid, args.out / grid.name, bindings)
        results.append({"seed": grid.name, "grid": summary(grid, args.pair),
                        "adaptive": summary(grown, args.pair), "spent": spent(grown)})
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"| study | FLOPs (of the grid's) | {args.pair} E, 95 % | holds | ±log ≤ "
          f"{args.threshold:.0%} | held-out error, 3σ_seed |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(row(f"{r['seed']} grid", r["grid"], None, args.threshold))
        print(row(f"{r['seed']} adaptive", r["adaptive"], r["spent"], args.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
