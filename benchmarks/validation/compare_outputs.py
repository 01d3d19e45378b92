"""A refactor changes no number: `mnmt-fit` run from two source trees on the same inputs, the JSON
outputs compared value by value.

Inputs (written once, by this tree, into the work folder; both trees read the same files):
  * a synthetic 2-pair study with learning curves (``fitting.test_utils``): ``report`` and
    ``fit --law`` power, joint, multilingual and bivariate;
  * datablations (Muennighoff et al. 2023) and Epoch's Chinchilla points (Besiroglu et al. 2024):
    ``fit --law chinchilla``;
  * Ye et al. 2024's 3-domain mixtures at 410M: ``mixture``;
  * a study's ``metrics.csv`` (``--metrics``): ``report``, with ``--report-args`` (the study's
    held-out runs and target sizes).
Each tree runs ``python -m fitting.cli`` with only itself on ``PYTHONPATH``. A tree is a folder or
a git revision of this repository (exported with ``git archive``). Numbers must agree to
``--rtol``; text that differs (e.g. a module named in a sentence) is listed apart.

Usage (from the repository root):
    python benchmarks/validation/compare_outputs.py BASE NEW [--metrics CSV [--report-args A]]
        [--only NAME] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from benchmarks.common import ROOT, SHARED_DATA  # noqa: E402

#: fewer refits than the defaults: the comparison needs equal numbers, not narrow intervals
N_REFITS = "20"
#: values that measure the machine, not the fit (wall-clock seconds)
TIMINGS = re.compile(r"(timing_s|seconds|wall_s|elapsed)")


def tree(spec: str, work: Path) -> Path:
    """The source tree ``spec`` names: a folder as it is, or a git revision exported there."""
    if os.path.isdir(spec):
        return Path(spec).resolve()
    out = work / f"tree_{spec.replace('/', '_')}"
    if not out.exists():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", spec], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def write_inputs(work: Path, metrics: str | None, report_args: str = ""
                 ) -> list[tuple[str, list[str], str]]:
    """The inputs and the commands run on them: (name, mnmt-fit arguments, output file).
    ``{out}`` in the arguments is the tree's own output folder."""
    from fitting.test_utils import make_curves_table, make_final_table

    inp = work / "inputs"
    inp.mkdir(parents=True, exist_ok=True)
    synth = inp / "synthetic.csv"
    make_curves_table(make_final_table(seed=3)).to_csv(synth, index=False)
    cmds = [("report synthetic", ["report", "--input", str(synth), "--out", "{out}/report",
                                  "--n-refits", N_REFITS], "report/fits.json")]
    for law in ("power", "joint", "multilingual", "bivariate"):
        cmds.append((f"fit {law} synthetic", ["fit", "--law", law, "--input", str(synth),
                                              "--n-refits", N_REFITS, "--out",
                                              f"{{out}}/fit_{law}.json"], f"fit_{law}.json"))
    datablations = SHARED_DATA / "datablations" / "data_constrained_val_losses.csv"
    if datablations.exists():
        cmds.append(("fit chinchilla datablations",
                     ["fit", "--law", "chinchilla", "--input", str(datablations), "--columns",
                      "n=params,d=tokens,loss=val_loss", "--uncertainty", "none",
                      "--out", "{out}/datablations.json"], "datablations.json"))
    epoch = SHARED_DATA / "epoch_chinchilla" / "svg_extracted_data.csv"
    if epoch.exists():
        df = pd.read_csv(epoch)
        pd.DataFrame({"n": df["Model Size"], "d": df["Training FLOP"] / (6 * df["Model Size"]),
                      "loss": df["loss"]}).to_csv(inp / "epoch.csv", index=False)
        cmds.append(("fit chinchilla epoch",
                     ["fit", "--law", "chinchilla", "--input", str(inp / "epoch.csv"),
                      "--uncertainty", "none", "--out", "{out}/epoch.json"], "epoch.json"))
    mixing = SHARED_DATA / "mixinglaws"
    if (mixing / "mixing_losses_tidy.csv").exists():
        from benchmarks.validation.validate_mixinglaws import infer_order, load

        wide, domains, _ = load(str(mixing), "3Mix", "410M")
        order = infer_order(wide, domains)
        out = pd.DataFrame({"run_id": wide["run_id"].astype(str), "n": 4.1e8})
        for j, dom in enumerate(order):
            out[f"w_{dom}"] = wide[f"r_{j}"].to_numpy(float)
            out[f"loss_{dom}"] = wide[dom].to_numpy(float)
        out.to_csv(inp / "mixing.csv", index=False)
        cmds.append(("mixture mixinglaws 3Mix 410M",
                     ["mixture", str(inp / "mixing.csv"), "--n-boot", N_REFITS, "--workers", "1",
                      "--quiet", "--out", "{out}/mixture"], "mixture/mixture.json"))
    if metrics:
        cmds.append(("report metrics.csv", ["report", "--input", metrics, "--out",
                                            "{out}/main_report", *shlex.split(report_args)],
                     "main_report/fits.json"))
    return cmds


def run(source: Path, out: Path, args: list[str]) -> tuple[int, float, str]:
    """``python -m fitting.cli ARGS`` with ``source`` alone on the path: status, seconds, stderr."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(source), "MPLBACKEND": "Agg"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fitting.cli",
                           *[a.replace("{out}", str(out)) for a in args]],
                          cwd=out, env=env, capture_output=True, text=True)
    return proc.returncode, time.perf_counter() - t0, proc.stderr[-2000:]


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of every number, string, bool and null in a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}/{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def compare(a: Any, b: Any, rtol: float) -> dict[str, Any]:
    """Numbers that differ beyond ``rtol`` (NaN equals NaN; timings left out), keys only one
    side has, and texts that differ; the largest relative difference seen."""
    la, lb = dict(leaves(a)), dict(leaves(b))
    numbers, texts, worst, n_numbers = [], [], 0.0, 0
    for key in la.keys() & lb.keys():
        x, y = la[key], lb[key]
        if TIMINGS.search(key):
            continue
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
                not isinstance(x, bool) and not isinstance(y, bool):
            n_numbers += 1
            if math.isnan(x) and math.isnan(y):
                continue
            rel = abs(x - y) / max(abs(x), abs(y), 1e-300) if x != y else 0.0
            worst = max(worst, rel)
            if not rel <= rtol:
                numbers.append(f"{key}: {x!r} → {y!r}")
        elif x != y:
            texts.append(f"{key}: {str(x)[:80]!r} → {str(y)[:80]!r}")
    return {"numbers_compared": n_numbers, "numbers_differ": sorted(numbers),
            "max_rel_diff": worst, "only_base": sorted(la.keys() - lb.keys()),
            "only_new": sorted(lb.keys() - la.keys()), "texts_differ": sorted(texts)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", help="source tree: a folder or a git revision")
    ap.add_argument("new", help="source tree: a folder or a git revision")
    ap.add_argument("--metrics", help="a study's metrics.csv, reported as `mnmt-fit report`")
    ap.add_argument("--report-args", default="",
                    help="more `mnmt-fit report` arguments for --metrics (the study's held-out "
                         "runs, target sizes: '--heldout RUN --target-sizes 2e6,8e6')")
    ap.add_argument("--work", help="work folder (default: a temporary one)")
    ap.add_argument("--rtol", type=float, default=1e-12)
    ap.add_argument("--only", help="run only the commands whose name contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="compare_outputs_"))
    trees = {"base": tree(args.base, work), "new": tree(args.new, work)}
    results = []
    for name, cmd, output in write_inputs(work, args.metrics, args.report_args):
        if args.only and args.only not in name:
            continue
        row: dict[str, Any] = {"name": name}
        payloads = {}
        for side, source in trees.items():
            out = work / side / name.replace(" ", "_")
            rc, secs, err = run(source, out, cmd)
            row[f"{side}_s"] = round(secs, 1)
            if rc:
                row[f"{side}_error"] = f"exit {rc}: {err.strip().splitlines()[-1:]}"
                continue
            # the output folder named in the outputs (figure paths) is not a difference
            payloads[side] = json.loads((out / output).read_text().replace(str(out), "{out}"))
        if len(payloads) == 2:
            row.update(compare(payloads["base"], payloads["new"], args.rtol))
        row["same"] = (len(payloads) == 2 and not row["numbers_differ"]
                       and not row["only_base"] and not row["only_new"])
        results.append(row)
        print(f"{name:34s} {'SAME' if row['same'] else 'DIFFERS'}  numbers "
              f"{row.get('numbers_compared', 0)}, max rel diff {row.get('max_rel_diff', 'n/a')}, "
              f"texts differing {len(row.get('texts_differ', []))}  "
              f"({row.get('base_s')} s / {row.get('new_s')} s)", file=sys.stderr)
    summary = {"base": args.base, "new": args.new, "work": str(work), "rtol": args.rtol,
               "all_same": all(r["same"] for r in results), "results": results}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        for r in results:
            for what in ("numbers_differ", "only_base", "only_new", "texts_differ"):
                for line in r.get(what, [])[:20]:
                    print(f"{r['name']}: {what}: {line}")
            for side in ("base", "new"):
                if f"{side}_error" in r:
                    print(f"{r['name']}: {side} failed: {r[f'{side}_error']}")
        print("ALL SAME" if summary["all_same"] else "DIFFERENCES FOUND")
    return 0 if summary["all_same"] else 1


if __name__ == "__main__":
    sys.exit(main())
