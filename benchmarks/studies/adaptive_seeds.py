"""The adaptive default judged on vocabulary seeds: each grown live beside its finished fixed grid.

For each finished main-job study GRID (any vocabulary seed), an adaptive study of the same seed
(`StudySpec.adaptive`, with the bindings given) is grown in OUT/<grid name>: GRID's data and run
directories are copied in first, so a run the design picks from the grid is found finished (the
same run the adaptive study would train: same configuration, seed and data), and only what the
grid lacks — the `adaptive_sizes` runs — trains. Then one Markdown table: per seed, the FLOPs
spent (of the grid's), the target pair's E with its 95 % interval against the exact L∞ (inside?
half-width of log E ≤ the threshold?), and the held-out run's error per pair within 3σ_seed
and inside its 95 % predictive interval —
beside the grid's own report on the same seed.

    python benchmarks/studies/adaptive_seeds.py GRID... --out DIR [--gin BINDING ...] [--json]
    python benchmarks/studies/adaptive_seeds.py --widths STUDY...

A seed whose adaptive study already has a report is not re-run (its bindings, kept in
OUT/<grid name>.gin, must be the ones given). The development seed (vocabulary seed 0, on which
the default was chosen) is refused unless ``--allow-dev``. ``--widths`` prints, per round of each
finished adaptive study, the FLOPs spent and the report's E interval with its two terms (the
resampled runs' sd and the forms' sd of log E; for an objective study, J's interval and its one
term, the held-out mixtures' error): the half-width against compute. Exit status 0
when every seed ran, 2 on bad input.
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
#: the vocabulary seed the default was chosen on: never a judged seed
DEV_SEED = 0


def check_bindings(out: Path, bindings: list[str]) -> str | None:
    """Why ``out`` cannot be reused with ``bindings`` (None when it can): a study grown with
    other bindings is another design."""
    kept = out.with_suffix(".gin")
    if not kept.exists():
        return None
    before = kept.read_text(encoding="utf-8").splitlines()
    return None if before == bindings else (
        f"{out}: grown with {before}, not {bindings}; use another --out")


#: the verification's runs (named by mixture, not by weights): never copied, so a study that
#: recommends other weights trains its own, and its verdicts are not the grid's runs again
VERIFICATION_RUNS = "*_verify-*"


def copy_finished(grid: Path, out: Path) -> None:
    """``grid``'s data and design run directories copied into ``out`` (where ``out`` has none
    yet): a run a design picks from the grid is then found finished, the same run it would
    train. The verification's runs are left out (:data:`VERIFICATION_RUNS`)."""
    out.mkdir(parents=True, exist_ok=True)
    for part in ("data", "runs"):
        if not (out / part).exists():
            shutil.copytree(grid / part, out / part,
                            ignore=shutil.ignore_patterns(VERIFICATION_RUNS))


def grow_beside(grid: Path, out: Path, bindings: list[str]) -> Path:
    """The adaptive study of ``grid``'s seed in ``out`` (the grid's runs copied in first)."""
    if not (out / "report" / "fits.json").exists():
        copy_finished(grid, out)
        seed = json.loads((grid / "study.json").read_text()).get("vocab_seed", 0)
        cmd = [str(Path(sys.executable).with_name("mnmt-study")), "run", "--out", str(out),
               "--gin", f"StudySpec.vocab_seed={seed}"]
        for binding in bindings:
            cmd += ["--gin", binding]
        out.with_suffix(".gin").write_text("\n".join(bindings) + "\n", encoding="utf-8")
        with open(out.with_suffix(".log"), "w", encoding="utf-8") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    return out


def summary(study: Path, pair: str) -> dict:
    """E's interval against the truth and the held-out errors of one study's report."""
    fits = json.loads((study / "report" / "fits.json").read_text())
    truth = fits["ground_truth"]
    e = (((fits.get("chinchilla") or {}).get("joint") or {}).get("meta") or {}).get(
        "E_predictive", {}).get(pair, {})
    held = {h["pair"]: {"error": h["error"], "within": bool(h.get("within_noise")),
                        "inside95": h.get("inside95")}
            for h in fits.get("heldout") or [] if h.get("primary")}
    lo, hi = e.get("lo95"), e.get("hi95")
    return {"truth": truth[pair], "E": e.get("estimate"), "lo95": lo, "hi95": hi,
            "relative": math.log(hi / lo) / 2 if lo and hi else None,
            "inside": bool(lo and hi and lo <= truth[pair] <= hi), "heldout": held}


def spent(study: Path) -> float | None:
    """The adaptive study's FLOPs as a share of its grid's (None for a fixed grid)."""
    records = adaptive.read_rounds(study)
    return records[-1]["spent"] / records[-1]["budget"] if records else None


def _number(value: float | None, spec: str) -> str:
    """``value`` formatted, "–" where the record has none (a round before any interval)."""
    return "–" if value is None else format(value, spec)


def width_rows(study: Path) -> list[str]:
    """One Markdown row per recorded round: FLOPs spent before it (of the budget) and the
    report's interval of the target (E, or an objective study's J) read then, with its
    resampling and forms terms (sd of the log) and, for a calibrated interval (J's), its one
    added term, the held-out mixtures' error ("–" where the interval has none)."""
    rows = []
    for record in adaptive.read_rounds(study):
        before = record.get("before") or {}
        spent_before = record["spent"] - record.get("cost", 0.0)
        if not before:
            continue
        rel = before.get("relative")
        width = "none" if rel is None or rel > 1 else f"±{rel:.1%}"
        held = before.get("sd_extrapolation") if before.get("rule") == "calibration" else None
        value = before.get("E") if before.get("E") is not None else before.get("J")
        rows.append(f"| {study.name} | {record['round']} | {spent_before / record['budget']:.0%} | "
                    f"{_number(value, '.4g')} | {width} | "
                    f"{_number(before.get('sd_resample'), '.3f')} | "
                    f"{_number(before.get('sd_forms'), '.3f')} | "
                    + ("–" if held is None else f"{held:.3f}") + " |")
    return rows


def heldout_text(pair: str, h: dict) -> str:
    """``en-de -2.4% beyond, in 95 %``: the error, 3σ_seed's verdict and the 95 % interval's."""
    inside = {None: "", True: ", in 95 %", False: ", out of 95 %"}[h.get("inside95")]
    return f"{pair} {h['error']:+.1%} {'within' if h['within'] else 'beyond'}{inside}"


def row(name: str, s: dict, share: float | None, threshold: float) -> str:
    e = "none" if s["lo95"] is None else (f"{s['E']:.4g} [{s['lo95']:.4g}, {s['hi95']:.4g}] "
                                          f"±{s['relative']:.1%}")
    narrow = "–" if s["relative"] is None else ("yes" if s["relative"] <= threshold else "no")
    held = "; ".join(heldout_text(p, h) for p, h in sorted(s["heldout"].items()))
    return (f"| {name} | {'100 %' if share is None else f'{share:.0%}'} | {e} | "
            f"{'yes' if s['inside'] else 'no'} | {narrow} | {held} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("grids", nargs="+", type=Path, help="finished main-job studies "
                    "(with --widths: finished adaptive studies)")
    ap.add_argument("--out", type=Path, help="folder of the adaptive studies")
    ap.add_argument("--widths", action="store_true",
                    help="tabulate each round's E (or J) interval and its terms against FLOPs")
    ap.add_argument("--allow-dev", action="store_true",
                    help=f"accept the development seed (vocabulary seed {DEV_SEED})")
    ap.add_argument("--gin", action="append", default=None,
                    help=f"StudySpec bindings (default: {' '.join(DEFAULT_BINDINGS)})")
    ap.add_argument("--pair", default="en-de", help="the target pair (default: %(default)s)")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="the half-width of log E judged (default: %(default)g)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.widths:
        bare = [s for s in args.grids if not adaptive.rounds_path(s).exists()]
        if bare:
            print(f"{bare[0]}: not an adaptive study (no {adaptive.rounds_path(bare[0])})",
                  file=sys.stderr)
            return 2
        print("| study | round | FLOPs spent before (of the budget) | report's E (or J) | 95 % "
              "±log | sd resample | sd forms | sd held-out (J's one term) |")
        print("|---|---|---|---|---|---|---|---|")
        for study in args.grids:
            print("\n".join(width_rows(study)))
        return 0
    bad = [g for g in args.grids if not (g / "report" / "fits.json").exists()]
    if bad:
        print(f"{bad[0]}: not a finished study (no report/fits.json)", file=sys.stderr)
        return 2
    if args.out is None:
        print("--out is required (the folder of the adaptive studies)", file=sys.stderr)
        return 2
    bindings = list(args.gin or DEFAULT_BINDINGS)
    for grid in args.grids:
        seed = json.loads((grid / "study.json").read_text()).get("vocab_seed", 0)
        why = check_bindings(args.out / grid.name, bindings)
        if seed == DEV_SEED and not args.allow_dev:
            why = (f"{grid}: vocabulary seed {seed} is the development seed the default was "
                   "chosen on; pass --allow-dev to grow it anyway")
        if why:
            print(why, file=sys.stderr)
            return 2
    results = []
    for grid in args.grids:
        grown = grow_beside(grid, args.out / grid.name, bindings)
        results.append({"seed": grid.name, "grid": summary(grid, args.pair),
                        "adaptive": summary(grown, args.pair), "spent": spent(grown)})
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"| study | FLOPs (of the grid's) | {args.pair} E, 95 % | holds | ±log ≤ "
          f"{args.threshold:.0%} | held-out error: 3σ_seed, 95 % |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(row(f"{r['seed']} grid", r["grid"], None, args.threshold))
        print(row(f"{r['seed']} adaptive", r["adaptive"], r["spent"], args.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
