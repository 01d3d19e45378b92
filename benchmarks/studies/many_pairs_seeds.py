"""Does cpu-many-pairs' advice hold on design seeds nobody chose it on? Runs the preset once per
design seed and tabulates the verification and the predictive intervals.

`StudySpec.design_seed` draws the Dirichlet design mixtures and the held-out mixtures (the
preset's settings were chosen on design seed 0). Per seed OUT/ds<K> gets `mnmt-study run
--preset cpu-many-pairs --gin StudySpec.design_seed=K` (skipped where a report exists;
`--rereport` writes the report again with this checkout's fitting code, training skipped), then
one Markdown table: the recommendation's measured J (mean ± seed sd over the verification's
paired seeds) against its prediction and 95 % predictive interval
(`fitting.intervals.mixture`), the baselines it beats (Holm p < 0.05 and a gap over 2
paired sd), how many verification mixtures and held-out mixture losses fell inside their 80 /
95 % intervals — beside the same count under the sum rule used before (every reported
component added: refits, forms, calibration, seed; normal quantiles; benchmarks/RESULTS.md,
"cpu-many-pairs on two design seeds nobody chose it on"), recomputed from the
components each interval reports — and the held-out larger size's errors; then the pooled
coverage of the calibrated intervals with Clopper–Pearson intervals over the points and over
the clusters (seed; seed × pair).

    flock /tmp/cpu.lock python benchmarks/studies/many_pairs_seeds.py --out /tmp/mp --seeds 1 2
    python benchmarks/studies/many_pairs_seeds.py --out /tmp/mp --seeds 1 2 --rereport --json

An adaptive study of the objective is judged beside today's grid of the same seed:

    python benchmarks/studies/many_pairs_seeds.py --out /tmp/mp/adaptive --seeds 7 8 \
        --beside /tmp/mp/grid --gin StudySpec.adaptive=True \
        --gin "StudySpec.adaptive_target='objective'"

``--gin`` bindings go to every study (kept in OUT/ds<K>.gin; a study grown with other bindings is
refused). ``--beside GRIDS`` copies GRIDS/ds<K>'s data and design run directories into OUT/ds<K>
first (a run the design picks is then found finished: the same run; the verification's runs are
not copied, so its verdicts are the study's own), and adds
the columns the issue's bar reads: the FLOPs the adaptive study spent (of its budget, the grid's
design runs times `adaptive_budget`) and the half-width of log J's 95 % interval beside the
grid's on the same seed, and the floor a law without error would leave: each held-out error
in J's calibration term is one run's, so t times the verified mixtures' seed sd of log J
(`noise_floor`) is the half-width that no design of these runs can expect to go below.

Exit status 0 when the recommendation beats every baseline on every seed, 1 otherwise, 2 on bad
input.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root (run or loaded by path)

from benchmarks.studies.adaptive_seeds import check_bindings, copy_finished, spent  # noqa: E402
from fitting.intervals.predictive import LEVELS, coverage_by_cluster, coverage_text  # noqa: E402
from fitting.report.sections.verification import verification_noise_floor  # noqa: E402


def run_seed(out: str, seed: int, rereport: bool, timeout: float, bindings: tuple[str, ...] = (),
             beside: str | None = None) -> dict:
    """Train (or re-report) the preset for design seed ``seed`` into ``out``, with ``bindings``;
    ``beside``'s data and runs copied in first."""
    done = os.path.exists(os.path.join(out, "report", "fits.json"))
    if done and not rereport:
        return {"wall_s": None, "rc": 0}
    if rereport:
        shutil.rmtree(os.path.join(out, "report"), ignore_errors=True)
    if beside and not done:
        copy_finished(Path(beside), Path(out))
    Path(out).with_suffix(".gin").write_text("".join(b + "\n" for b in bindings), encoding="utf-8")
    study = os.path.join(os.path.dirname(sys.executable), "mnmt-study")
    cmd = [study, "run", "--preset", "cpu-many-pairs", "--out", out,
           "--gin", f"StudySpec.design_seed={seed}"]
    for binding in bindings:
        cmd += ["--gin", binding]
    t0 = time.perf_counter()
    with open(out + (".rereport.log" if done else ".log"), "w", encoding="utf-8") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    return {"wall_s": None if done else time.perf_counter() - t0, "rc": rc}


def _inside(cov: dict | None) -> str:
    if not cov or not (cov.get("0.80") or {}).get("n"):
        return "–"
    return " · ".join(f"{cov[q]['inside']}/{cov[q]['n']}" for q in ("0.80", "0.95"))


def sum_rule_coverage(marked: list[tuple[dict, float]]) -> dict:
    """{level: {inside, n}} of the intervals' points (interval dict, measured value) had each
    interval added every component it reports in quadrature, with normal quantiles (the sum
    rule of :func:`fitting.intervals.predictive.predictive_interval`)."""
    z = {"0.80": 1.2815516, "0.95": 1.9599640}
    out = {q: {"inside": 0, "n": 0} for q in z}
    for iv, y in marked:
        if not iv or not (y and y > 0):
            continue
        s = math.sqrt(sum(float(iv.get(k) or 0.0) ** 2 for k in
                          ("sd_resample", "sd_forms", "sd_extrapolation", "sigma_seed")))
        err = abs(math.log(float(iv["estimate"]) / float(y)))
        for q, zq in z.items():
            out[q]["n"] += 1
            out[q]["inside"] += int(err <= zq * s)
    return out


def seed_row(out: str, seed: int, run: dict) -> dict:
    """The verification and interval figures of the study in ``out``."""
    path = os.path.join(out, "report", "fits.json")
    if not os.path.exists(path):
        return {"seed": seed, **run, "error": f"no report ({path})"}
    with open(path, encoding="utf-8") as f:
        mixture = json.load(f).get("mixture") or {}
    ver = mixture.get("verification") or {}
    rec = (ver.get("mixtures") or {}).get("recommended") or {}
    pred = rec.get("predicted") or {}
    iv = pred.get("interval") or {}
    larger = {p: e["relative_error"] for rid, per in (mixture.get("heldout") or {}).items()
              if rid.startswith("mini-2") for p, e in per.items() if "relative_error" in e}
    held = [(e.get("predictive"), e.get("measured")) for per in
            (mixture.get("heldout") or {}).values() for e in per.values() if e.get("predictive")]
    ver_marked = [((m.get("predicted") or {}).get("interval"),
                   (m.get("measured") or {}).get("objective"))
                  for m in (ver.get("mixtures") or {}).values()]
    lo, hi = iv.get("lo95"), iv.get("hi95")
    objective_iv = (mixture.get("recommendation") or {}).get("objective_interval") or {}
    return {"seed": seed, **run, "measured": rec.get("measured", {}).get("objective"),
            "sd": rec.get("sd", {}).get("objective"), "predicted": pred.get("objective"),
            "lo95": lo, "hi95": hi, "inside95": rec.get("inside95"),
            "half_width_log": math.log(hi / lo) / 2 if lo and hi else None,
            "spent": spent(Path(out)),
            "noise_floor": noise_floor(ver, objective_iv.get("calibration_n")),
            "beats": ver.get("beats") or {},
            "holm_p": {b: c.get("p_holm") for b, c in (ver.get("comparisons") or {}).items()},
            "verification_coverage": (ver.get("predictive") or {}).get("coverage"),
            "heldout_coverage": (mixture.get("heldout_summary") or {}).get("coverage"),
            "verification_sum_rule": sum_rule_coverage(ver_marked),
            "heldout_sum_rule": sum_rule_coverage(held),
            "verification_marks": {f"{q:.2f}": [bool(m[f"inside{round(100 * q)}"]) for m in
                                                (ver.get("mixtures") or {}).values()
                                                if "inside80" in m
                                                and ((m.get("predicted") or {}).get("interval")
                                                     or {}).get("calibrated")]
                                   for q in LEVELS},
            "heldout_marks": {f"{q:.2f}": {p: [bool(e[f"inside{round(100 * q)}"]) for per in
                                               (mixture.get("heldout") or {}).values()
                                               for pp, e in per.items() if pp == p
                                               and "inside80" in e and e.get("calibrated")]
                                           for p in sorted({pp for per in (mixture.get(
                                               "heldout") or {}).values() for pp in per})}
                              for q in LEVELS},
            "larger_size_errors": larger}


def pooled_coverage(rows: list[dict]) -> dict[str, dict]:
    """Pooled over design seeds, calibrated intervals only, with Clopper–Pearson 90 % intervals
    over the points and over the clusters (:func:`fitting.intervals.predictive.
    coverage_by_cluster`): ``verification`` the verification mixtures' J (a cluster per seed:
    one fit's mixtures), ``heldout`` the held-out mixture losses (a cluster per seed × pair)."""
    good = [r for r in rows if "error" not in r]
    return {
        "verification": coverage_by_cluster({q: {r["seed"]: r["verification_marks"][f"{q:.2f}"]
                                                 for r in good} for q in LEVELS}),
        "heldout": coverage_by_cluster({q: {(r["seed"], p): marks for r in good
                                            for p, marks in r["heldout_marks"][f"{q:.2f}"]
                                            .items()} for q in LEVELS})}


def coverage_lines(cov: dict[str, dict]) -> str:
    """The pooled coverage as printed: one line per kind, 80 % and 95 %."""
    what = {"verification": "verification mixtures' J", "heldout": "held-out mixture losses"}
    return "\n".join(f"{what[k]} inside their calibrated predictive intervals, pooled: "
                     + "; ".join(f"{q:.0%} {coverage_text(c, q)}" for q in LEVELS)
                     for k, c in cov.items())


def noise_floor(verification: dict, calibration_n: float | None) -> dict | None:
    """The half-width of log J's 95 % interval a law without error would still have
    (:func:`fitting.report.sections.verification.verification_noise_floor`): what the report's
    Verification section prints, read from a fits.json written before it did."""
    return verification_noise_floor(verification.get("mixtures") or {}, calibration_n)


def half_width_text(row: dict, grid: dict | None) -> str:
    """``±12.3 % (0.45 of the grid's ±27.1 %)``: log J's 95 % half-width, beside the grid's."""
    mine = row.get("half_width_log")
    if mine is None:
        return "none"
    theirs = (grid or {}).get("half_width_log")
    return f"±{mine:.1%}" + (f" ({mine / theirs:.2f} of the grid's ±{theirs:.1%})" if theirs
                              else "")


def beside_table(rows: list[dict], grids: dict[int, dict]) -> str:
    """Per seed, the adaptive study against the grid: FLOPs spent, J's half-width and the
    verdicts of the issue's bar (measured J inside the 95 % interval; every baseline beaten)."""
    out = ["| design seed | FLOPs spent (of the budget) | log J's 95 % half-width | floor: a law "
           "without error (seed sd of log J) | measured J inside (adaptive · grid) | beats every "
           "baseline (adaptive · grid) |", "|---|---|---|---|---|---|"]
    for r in rows:
        g = grids.get(r["seed"]) or {}
        share = "–" if r.get("spent") is None else f"{r['spent']:.0%}"
        beats = [("yes" if x.get("beats") and all(x["beats"].values()) else "no") for x in (r, g)]
        inside = [{True: "yes", False: "no"}.get(x.get("inside95"), "–") for x in (r, g)]
        floor = r.get("noise_floor")
        floor_text = "–" if not floor else (f"±{floor['half_width']:.1%} ({floor['sigma_log']:.1%}"
                                            f", {floor['dof']} dof)")
        out.append(f"| {r['seed']} | {share} | {half_width_text(r, g)} | {floor_text} | "
                   f"{' · '.join(inside)} | {' · '.join(beats)} |")
    return "\n".join(out)


def table(rows: list[dict]) -> str:
    head = ["design seed", "wall s", "recommended J measured (± seed sd)", "predicted [95 % PI]",
            "inside", "beats (Holm p)", "verification mixtures inside 80 · 95 % (sum rule)",
            "held-out mixture losses inside 80 · 95 % (sum rule)",
            "held-out larger size, errors"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['seed']} | – | {r['error']} |")
            continue
        beats = ", ".join(f"{b} {'yes' if ok else 'NO'} ({r['holm_p'].get(b, float('nan')):.2g})"
                          for b, ok in r["beats"].items())
        out.append("| " + " | ".join([
            str(r["seed"]), "–" if r["wall_s"] is None else f"{r['wall_s']:.0f}",
            f"{r['measured']:.4f} ± {r['sd']:.4f}",
            f"{r['predicted']:.4f} [{r['lo95']:.4f}, {r['hi95']:.4f}]",
            "yes" if r["inside95"] else "NO", beats,
            f"{_inside(r['verification_coverage'])} ({_inside(r['verification_sum_rule'])})",
            f"{_inside(r['heldout_coverage'])} ({_inside(r['heldout_sum_rule'])})",
            ", ".join(f"{p} {100 * e:+.1f} %" if e is not None else f"{p} not predicted"
                      for p, e in sorted(r["larger_size_errors"].items()))
        ]) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory holding one study per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per study")
    ap.add_argument("--rereport", action="store_true",
                    help="write each finished seed's report again (fitting code changed)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON as well")
    ap.add_argument("--gin", action="append", default=[],
                    help="a StudySpec binding for every study (repeatable)")
    ap.add_argument("--beside", help="folder of today's grids (GRIDS/ds<K>, finished): their "
                    "runs copied in first, and the studies judged beside them")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.beside and os.path.abspath(args.beside) == os.path.abspath(args.out):
        print(f"--beside {args.beside} is --out: the studies would be judged beside themselves",
              file=sys.stderr)
        return 2
    for seed in args.seeds:
        out = os.path.join(args.out, f"ds{seed}")
        why = check_bindings(Path(out), list(args.gin))
        if (why is None and args.gin and not Path(out).with_suffix(".gin").exists()
                and os.path.exists(os.path.join(out, "report", "fits.json"))):
            why = f"{out}: finished without bindings, not {args.gin}; use another --out"
        grid = os.path.join(args.beside or "", f"ds{seed}", "report", "fits.json")
        if why is None and args.beside and not os.path.exists(grid):
            why = f"{grid}: no finished grid of design seed {seed} to grow beside"
        if why:
            print(why, file=sys.stderr)
            return 2
    rows = []
    for seed in args.seeds:
        out = os.path.join(args.out, f"ds{seed}")
        beside = os.path.join(args.beside, f"ds{seed}") if args.beside else None
        run = run_seed(out, seed, args.rereport, args.timeout, tuple(args.gin), beside)
        rows.append(seed_row(out, seed, run))
        print(f"design seed {seed}: done ({run})", file=sys.stderr)
    print(table(rows))
    print(coverage_lines(pooled_coverage(rows)))
    if args.beside:
        grids = {s: seed_row(os.path.join(args.beside, f"ds{s}"), s, {}) for s in args.seeds}
        print(beside_table(rows, grids))
    if args.json:
        print(json.dumps(rows, default=float))
    return 0 if all(r.get("beats") and all(r["beats"].values()) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
