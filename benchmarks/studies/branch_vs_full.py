"""Does a cool-down branch give the loss of a run trained for its budget? (Hägele et al. 2024)

Trains, on the synthetic family with the default study's schedule (rsqrt, cool-down over the
last 40 % of steps), three small studies into OUT:

- ``T1000``: runs of 1,000 steps with branches at 25 % and 50 % (D = 417 and 833), seeds 0 and 1;
- ``T417`` and ``T833``: separate full runs of 417 and 833 steps, seed 0, each with its own
  cool-down,

then prints, per size, pair and budget D, the branch's final validation loss (seed 0), the full
run's, their relative difference, the seed-to-seed difference of the branches (seed 1 against
seed 0: the noise a difference is measured against), and the parent's uncooled loss at its last
evaluation at or before D (what a fit on intermediate evaluations reads instead).

    python benchmarks/studies/branch_vs_full.py --out /tmp/branch_vs_full [--json]

Studies that finished are not trained again (`mnmt-study run` skips finished runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SIZES = ("micro-1", "micro-3", "mini-2")
# the environment's mnmt-study (beside this Python), else the one on PATH
_BESIDE = os.path.join(os.path.dirname(sys.executable), "mnmt-study")
STUDY_COMMAND = _BESIDE if os.path.exists(_BESIDE) else "mnmt-study"
STUDIES = {"T1000": ["StudySpec.seeds=(0,1)", "StudySpec.cooldown_branches=(0.25,0.5)"],
           "T417": ["StudySpec.train_steps=417", "StudySpec.cooldown_branches=()"],
           "T833": ["StudySpec.train_steps=833", "StudySpec.cooldown_branches=()"]}


def train(out: Path, sizes: tuple[str, ...]) -> dict[str, float]:
    """Run the three studies (skipping finished runs); wall seconds of each."""
    common = ["--preset", "default", "--gin", f"StudySpec.sizes={tuple(sizes)!r}",
              "--gin", "StudySpec.weights=(0.5,)", "--gin", "StudySpec.heldout=()"]
    walls = {}
    for name, extra in STUDIES.items():
        cmd = [STUDY_COMMAND, "run", *common, "--out", str(out / name)]
        for binding in extra:
            cmd += ["--gin", binding]
        start = time.monotonic()
        with open(out / f"{name}.log", "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
        walls[name] = time.monotonic() - start
    return walls


def losses(run_dir: Path) -> dict[str, dict[int, float]]:
    """pair -> step -> validation loss of one run directory."""
    out: dict[str, dict[int, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["metric"] == "loss" and row["eval_set"] == "validation":
            out.setdefault(row["task"], {})[int(row["step"])] = float(row["value"])
    return out


def final(run_dir: Path) -> dict[str, float]:
    return {pair: by_step[max(by_step)] for pair, by_step in losses(run_dir).items()}


def table(out: Path, sizes: tuple[str, ...]) -> list[dict]:
    rows = []
    for size in sizes:
        parent = out / "T1000" / "runs" / f"{size}_p0.50_s0"
        curve = losses(parent)
        for b, full_name in ((250, "T417"), (500, "T833")):
            branch = final(Path(f"{parent}_cd{b}"))
            other_seed = final(out / "T1000" / "runs" / f"{size}_p0.50_s1_cd{b}")
            full = final(out / full_name / "runs" / f"{size}_p0.50_s0")
            d = int(full_name[1:])
            for pair in sorted(branch):
                uncooled_step = max(s for s in curve[pair] if s <= d)
                rows.append({
                    "size": size, "pair": pair, "D_steps": d, "branch": branch[pair],
                    "full_run": full[pair],
                    "branch_vs_full": branch[pair] / full[pair] - 1,
                    "seed_1_vs_seed_0": other_seed[pair] / branch[pair] - 1,
                    "uncooled_step": uncooled_step,
                    "uncooled": curve[pair][uncooled_step],
                    "uncooled_vs_branch": curve[pair][uncooled_step] / branch[pair] - 1})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = tuple(args.sizes.split(","))
    walls = train(out, sizes)
    rows = table(out, sizes)
    result = {"machine": f"{os.cpu_count()} cores", "loadavg": os.getloadavg(),
              "wall_s": walls, "rows": rows}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print("size     pair   D    branch  full    br/full  seed1/seed0  uncooled@step  unc/br")
    for r in rows:
        print(f"{r['size']:8s} {r['pair']} {r['D_steps']:4d} {r['branch']:.4f} {r['full_run']:.4f} "
              f"{100 * r['branch_vs_full']:+6.2f} % {100 * r['seed_1_vs_seed_0']:+6.2f} %    "
              f"{r['uncooled']:.4f}@{r['uncooled_step']:<4d}  {100 * r['uncooled_vs_branch']:+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
