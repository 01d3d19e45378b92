"""Is the main job's recovery of the truth robust to the vocabulary? Checks 1 and 4 on several
vocabulary seeds.

Runs the main job (`mnmt-study run`, the default preset) once per vocabulary seed
(`StudySpec.vocab_seed`: another sentence sample, another 704-piece vocabulary), each into
OUT/seed<K>, then `benchmarks/studies/check_main_job.py` on each, and prints one Markdown table: per
seed, the wall time, check 1 (fitted L∞ against the exact one, per pair) and check 4 (the
held-out run's error, per pair, and whether it is within 2 % without the noise clause), the
leave-largest-size-out backtest of the leading L(N, D) law against k× the measured seed noise
(k = 3, or Student's t on its dof where wider), per pair, the report's two curve-law rows (longer run, later cool-down) against the σ each is
judged on, per pair, and whether both hold for both pairs (a missing or unjudged row never
holds), the pooled coverage of the calibrated predictive intervals with Clopper–Pearson
intervals over the points and over the seed × pair clusters, and whether all six checks pass (checks 1 and 4 as `check_main_job` judges them). A seed whose output already holds a report is not re-run
(`mnmt-study run` resumes; pass --fresh to start over). ``--report-into DIR`` writes each
finished seed's report again with this checkout's fitting code into DIR/seed<K>/report and
tabulates those, the study untouched (before / after a fitting change, without --rereport's
overwriting).

    flock /tmp/cpu.lock python benchmarks/studies/main_job_seeds.py --out /tmp/seeds --seeds 0 1 2
    python benchmarks/studies/main_job_seeds.py --out /tmp/seeds --seeds 0 1 2 --json
    python benchmarks/studies/main_job_seeds.py --out /tmp/seeds --seeds 0 1 2 --report-into /tmp/after

Exit status 0 when checks 1 and 4 hold on every seed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

from fitting.intervals.predictive import LEVELS, coverage_by_cluster, coverage_text
from fitting.report.sections.extrapolation import HOLDS, LATER_COOLDOWN, LONGER_RUN

_HERE = os.path.dirname(os.path.abspath(__file__))
#: the report's curve-law rows
CURVE_KINDS = (LONGER_RUN, LATER_COOLDOWN)


def _script(name: str):
    """A sibling script of benchmarks/studies/ imported as a module (scripts are run by path)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_seed(out: str, seed: int, extra_gin: list[str], timeout: float) -> dict:
    """Run the main job for vocabulary seed ``seed`` into ``out`` (if it has no report yet) and
    return its wall time (None when it was not run here) and its return code."""
    if os.path.exists(os.path.join(out, "report", "fits.json")):
        return {"wall_s": None, "rc": 0}
    study = os.path.join(os.path.dirname(sys.executable), "mnmt-study")
    cmd = [study, "run", "--out", out, "--gin", f"StudySpec.vocab_seed={seed}"]
    for g in extra_gin:
        cmd += ["--gin", g]
    t0 = time.perf_counter()
    with open(out + ".log", "w", encoding="utf-8") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
    return {"wall_s": time.perf_counter() - t0, "rc": rc}


def seed_row(out: str, seed: int, run: dict, check) -> dict:
    """Checks 1 and 4 (and whether all five pass) of the study in ``out``."""
    path = os.path.join(out, "report", "fits.json")
    if not os.path.exists(path):
        return {"seed": seed, **run, "error": f"no report ({path})"}
    with open(path, encoding="utf-8") as f:
        fits = json.load(f)
    result = check.check(fits)
    l_inf = {p: {"fit": d["fit"], "true": d["true"], "error": d["error"], "ok": d["ok"]}
             for p, d in result["l_inf"].items()}
    held = {h["pair"]: {"predicted": h["predicted"], "measured": h["measured"],
                        "error": h["error"], "within_rel": bool(h.get("within_rel")),
                        "law": h["law"]} for h in result["heldout"]["entries"]}
    larger = {r.get("pair"): r for r in result["extrapolation"]["rows"]
              if r.get("kind") == check.LARGER_SIZE}
    curves = curve_rows((fits.get("extrapolation") or {}).get("rows") or [])
    backtest = {p: {"rmse_rel": bt["rmse_rel"], "noise_rel": bt["noise_rel"],
                    "tolerance": bt["tolerance"], "within": bt["within"],
                    "sigma_seeds": (larger.get(p) or {}).get("sigma_seeds"),
                    "sigma_dof": (larger.get(p) or {}).get("sigma_dof")}
                for p, bt in result["backtest"].items()}
    for e in fits.get("heldout") or []:   # predictive intervals (fitting.intervals.heldout)
        if e.get("primary") and e.get("predictive") and e["pair"] in held:
            iv = e["predictive"]
            held[e["pair"]].update(lo95=iv["lo95"], hi95=iv["hi95"], lo80=iv["lo80"],
                                   hi80=iv["hi80"], sd_total=iv["sd_total"],
                                   inside80=e["inside80"], inside95=e["inside95"],
                                   calibrated=bool(e.get("calibrated")))
    eq11 = {e["pair"]: {"error": e["error"], "inside80": e["inside80"],
                        "inside95": e["inside95"], "sd_total": e["predictive"]["sd_total"],
                        "calibrated": e.get("calibrated")}
            for e in fits.get("heldout") or []   # the frontier's law (eq11_intervals)
            if str(e.get("law", "")).startswith("eq. 11") and e.get("predictive")}
    joint_bt = (((fits.get("chinchilla") or {}).get("joint") or {}).get("backtest") or {})
    for p, bt in joint_bt.items():   # the backtest points' predictive intervals
        if p in backtest and isinstance(bt, dict) and bt.get("coverage"):
            backtest[p]["coverage"] = bt["coverage"]
            backtest[p]["calibrated"] = (bt.get("predictive") or {}).get("calibrated")
            backtest[p]["marks"] = {f"{q:.2f}": [bool(e[f"inside{round(100 * q)}"]) for e in
                                                 bt.get("errors") or [] if e.get("calibrated")
                                                 and f"inside{round(100 * q)}" in e]
                                    for q in LEVELS}
    # the checks' own verdicts (check_main_job.checks): an empty list never passes here
    return {"seed": seed, **run, "l_inf": l_inf, "heldout": held, "backtest": backtest,
            "eq11_heldout": eq11, "curves": curves,
            "check1_ok": result["checks"][1]["status"] == "ok",
            "check4_ok": result["checks"][4]["status"] == "ok",
            "all_ok": result["all_ok"], "regime": result["regime"]}


def curve_rows(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{pair: {kind: {rmse, three_sigma, verdict}}} of the report's two curve-law rows
    (``longer run``, ``later cool-down``), a row not computed (no RMSE) kept with its
    verdict."""
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        if r.get("kind") in CURVE_KINDS:
            out.setdefault(str(r.get("pair")), {})[r["kind"]] = {
                k: r.get(k) for k in ("rmse", "three_sigma", "verdict")}
    return out


def curves_hold(r: dict) -> bool | None:
    """Whether both curve rows hold for every pair of a seed's row: a missing row, a row not
    computed or not judged never holds (False); None where the seed has no curve row at all."""
    curves = r.get("curves") or {}
    if not curves:
        return None
    pairs = set(curves) | set(r.get("l_inf") or {})
    return all((curves.get(p) or {}).get(k, {}).get("verdict") == HOLDS
               for p in pairs for k in CURVE_KINDS)


def _curve_cell(c: dict | None) -> str:
    if not c:
        return "missing"
    if c["rmse"] is None:
        return str(c.get("verdict") or "not computed")
    if c["three_sigma"] is None or c.get("verdict") not in (HOLDS, "does not hold"):
        return f"{100 * c['rmse']:.2f} % (not judged)"
    return f"{100 * c['rmse']:.2f} vs {100 * c['three_sigma']:.2f} %"


def _judged(b: dict) -> str:
    """"within" / "beyond" of a backtest judged against its σ, "not judged" where σ rests on
    fewer than 2 dof or its dof are not known."""
    if b.get("sigma_dof") is None or b["sigma_dof"] < 2:
        return "not judged"
    return "within" if b["within"] else "beyond"


def table(rows: list[dict]) -> str:
    """The Markdown table of :func:`seed_row` results."""
    pairs = sorted({p for r in rows for key in ("l_inf", "curves") for p in r.get(key) or {}})
    head = (["vocab seed", "wall s"] + [f"L∞ {p} fitted / exact" for p in pairs]
            + [f"held-out {p}" for p in pairs]
            + [f"backtest {p} vs k× seed noise" for p in pairs]
            + [f"{k} {p} vs 3σ" for p in pairs for k in CURVE_KINDS]
            + ["curve rows hold", "checks 1, 4", "all five"])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['seed']} | – | {r['error']} |")
            continue
        cells = [str(r["seed"]), "–" if r["wall_s"] is None else f"{r['wall_s']:.0f}"]
        for p in pairs:
            d = r["l_inf"].get(p)
            cells.append("–" if not d or d["error"] is None else
                         f"{d['fit']:.4f} / {d['true']:.4f} ({100 * d['error']:+.1f} %)")
        for p in pairs:
            h = r["heldout"].get(p)
            cells.append("–" if not h else f"{100 * h['error']:+.2f} %"
                         + ("" if h["within_rel"] else " (> 2 %)")
                         + ("" if "inside95" not in h else
                            f"; 95 % [{h['lo95']:.4f}, {h['hi95']:.4f}] "
                            f"{'inside' if h['inside95'] else 'OUTSIDE'}"))
        for p in pairs:
            b = r.get("backtest", {}).get(p)
            cells.append("–" if not b or b["rmse_rel"] is None else
                         f"{100 * b['rmse_rel']:.2f} % (no seed noise: not judged)"
                         if b["noise_rel"] is None else
                         f"{100 * b['rmse_rel']:.2f} % vs {100 * b['tolerance'] * b['noise_rel']:.2f} %"
                         f" ({_judged(b)}; "
                         + ("seeds ?" if b.get("sigma_dof") is None else
                            f"{b['sigma_seeds']} seeds, {b['sigma_dof']} dof"
                            + ("" if b["sigma_dof"] >= 2 else ": information"))
                         + ")")
        for p in pairs:
            cells += [_curve_cell((r.get("curves") or {}).get(p, {}).get(k)) for k in CURVE_KINDS]
        hold = curves_hold(r)
        cells.append("–" if hold is None else "yes" if hold else "no")
        cells.append("ok" if r["check1_ok"] and r["check4_ok"] else "FAIL")
        cells.append("pass" if r["all_ok"] else "fail")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _entry_marks(rows: list[dict], key: str) -> dict[float, dict]:
    """{level: {(seed, pair): [inside?]}} of the calibrated entries under ``key``."""
    return {q: {(r["seed"], p): [bool(h[f"inside{round(100 * q)}"])]
                for r in rows for p, h in (r.get(key) or {}).items()
                if "inside95" in h and h.get("calibrated")} for q in LEVELS}


def pooled_coverage(rows: list[dict]) -> dict[str, dict]:
    """Pooled over seeds, each with Clopper–Pearson 90 % intervals over the points and over
    the clusters (seed × pair, :func:`fitting.intervals.predictive.coverage_by_cluster`), of
    calibrated intervals only (an uncalibrated one is never counted): ``heldout`` the held-out
    entries inside their 80 % / 95 % predictive intervals, ``backtest`` the larger-size backtest
    points inside theirs, ``eq11`` the held-out runs inside eq. 11's (the frontier's law)."""
    backtest = {q: {(r["seed"], p): (b.get("marks") or {}).get(f"{q:.2f}") or []
                    for r in rows for p, b in (r.get("backtest") or {}).items()}
                for q in LEVELS}
    return {"heldout": coverage_by_cluster(_entry_marks(rows, "heldout")),
            "backtest": coverage_by_cluster(backtest),
            "eq11": coverage_by_cluster(_entry_marks(rows, "eq11_heldout"))}


def coverage_lines(cov: dict[str, dict]) -> str:
    """The pooled coverage as printed: one line per kind, 80 % and 95 %."""
    what = {"heldout": "held-out runs (L(N, D))", "backtest": "larger-size backtest points",
            "eq11": "held-out runs by eq. 11 (the frontier's law)"}
    return "\n".join(f"{what[k]} inside their calibrated predictive intervals, pooled: "
                     + "; ".join(f"{q:.0%} {coverage_text(c, q)}" for q in LEVELS)
                     for k, c in cov.items())


def rereport(out: str, extra_gin: list[str]) -> None:
    """Write the study's report again with this checkout's fitting code (training skipped:
    `mnmt-study run` resumes a finished study)."""
    shutil.rmtree(os.path.join(out, "report"), ignore_errors=True)
    with open(os.path.join(out, "study.json"), encoding="utf-8") as f:
        seed = json.load(f).get("vocab_seed", 0)
    study = os.path.join(os.path.dirname(sys.executable), "mnmt-study")
    with open(out + ".rereport.log", "w", encoding="utf-8") as log:
        cmd = [study, "run", "--out", out, "--gin", f"StudySpec.vocab_seed={seed}"]
        for g in extra_gin:
            cmd += ["--gin", g]
        subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)


def report_into(out: str, dest: str) -> None:
    """Write the finished study ``out``'s report again into ``dest``/report with this
    checkout's fitting code (`benchmarks/studies/rewrite_report.py`: the arguments
    `mnmt-study run` gives it, the ground truth from the study's own fits.json); ``out`` is
    only read."""
    _script("rewrite_report").rewrite_report(out, dest)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory holding one study per seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--gin", action="append", default=[], metavar="NAME=VALUE",
                    help="further bindings for every study")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per study")
    ap.add_argument("--fresh", action="store_true", help="delete each seed's output first")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON as well")
    ap.add_argument("--rereport", action="store_true",
                    help="write each finished seed's report again (fitting code changed)")
    ap.add_argument("--report-into", metavar="DIR",
                    help="write each finished seed's report again into DIR/seed<K> (the study "
                         "untouched) and tabulate those; no seed is trained")
    args = ap.parse_args(argv)
    check = _script("check_main_job")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for seed in args.seeds:
        out = os.path.join(args.out, f"seed{seed}")
        if args.report_into:   # before --fresh: the study is only read
            dest = os.path.join(args.report_into, f"seed{seed}")
            if os.path.exists(os.path.join(out, "report", "fits.json")):
                report_into(out, dest)
            rows.append(seed_row(dest, seed, {"wall_s": None, "rc": 0}, check))
            continue
        if args.fresh and os.path.exists(out):
            shutil.rmtree(out)
        if args.rereport and os.path.exists(os.path.join(out, "study.json")):
            rereport(out, args.gin)
        run = run_seed(out, seed, args.gin, args.timeout)
        rows.append(seed_row(out, seed, run, check))
        print(f"vocab seed {seed}: done ({run})", file=sys.stderr)
    print(table(rows))
    print(coverage_lines(pooled_coverage(rows)))
    held = [h for h in (curves_hold(r) for r in rows) if h is not None]
    if held:
        print(f"both curve rows hold for both pairs on {sum(held)} of {len(held)} seeds")
    if args.json:
        print(json.dumps(rows, default=float))
    return 0 if all(r.get("check1_ok") and r.get("check4_ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
