"""Kill trials of the main job: SIGKILL `mnmt-study run --preset ci` at random moments, re-run it,
and compare with an uninterrupted run. Nothing may be lost, duplicated or changed.

One uninterrupted reference study first; then each trial starts the same study in a fresh
output directory, SIGKILLs it after a delay drawn uniformly from (0, the reference's wall time)
— so kills land in data preparation, training, checkpoint writing, export and the report in
proportion to the time each takes — and runs the same command again until it exits 0 (a re-run
that finds the lock still held by the dying workers, exit 75, waits and tries again). Half the
trials kill only the study process (its worker processes then get SIGTERM from the kernel and
checkpoint), half kill its whole process group at once (as a lost machine would). A trial then
counts, against the reference:

* rows lost: (run, step, task, eval set, metric) keys of the reference's metrics.jsonl files
  missing from the trial's;
* rows duplicated: keys that appear more than once in a trial's metrics.jsonl;
* the largest relative difference of any metrics.jsonl value, of any `metrics.csv` value and of
  any number in `report/fits.json` (the study is deterministic: resume must reproduce it), each
  with the field where it occurs and its two values. The wall-clock seconds a fit took
  (:data:`DURATIONS`) are measured, not computed, and left out.

Reported as JSON with `--json`: the machine, the settings, one object per trial (delay, what
was killed, the phase the study was in — read from its last progress line — re-runs needed,
rows lost and duplicated, the largest differences with their fields and values, seconds) and
the totals; a trial that differs also prints, per file, the field and its two values.

    python benchmarks/studies/faults.py --trials 50 --parallel 2 --json
    python benchmarks/studies/faults.py --trials 6 --phase report --json   # kills aimed at one phase
    python benchmarks/studies/faults.py --trials 3 --gin StudySpec.adaptive=True --gin …   # grown
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# the repository root (run or loaded by path)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from benchmarks.common import machine  # noqa: E402

LOCKED = 75  # mnmt-study's exit status when another process holds OUT's lock


def _command(out: Path, study_args: tuple[str, ...]) -> list[str]:
    """The ci study into ``out`` with ``study_args`` (--workers, --gin bindings)."""
    return [sys.executable, "-m", "mnmt.study.cli", "run", "--preset", "ci", "--out", str(out),
            *study_args]


def _run_to_completion(out: Path, study_args: tuple[str, ...], log, timeout: float) -> int:
    """Run the study until it exits 0; returns how many runs it took (lock waits included)."""
    deadline = time.monotonic() + timeout
    attempts = 0
    while True:
        attempts += 1
        proc = subprocess.run(_command(out, study_args), stdout=log, stderr=subprocess.STDOUT,
                              timeout=max(1.0, deadline - time.monotonic()))
        if proc.returncode == 0:
            return attempts
        if proc.returncode != LOCKED or time.monotonic() > deadline:
            raise RuntimeError(f"{out}: re-run exited {proc.returncode} (see {log.name})")
        time.sleep(1.0)  # the killed study's workers are still checkpointing


#: --phase: the progress line after which a targeted kill is due, and the window (seconds) of
#: its random delay: data preparation begins with the study's first line; export with the line
#: of the last run done ("[N/N] ..."); the report with the export line.
PHASES = {"data": (re.compile(r"^study "), 8.0),
          "export": (re.compile(r"^\[(\d+)/\1\] .*done in"), 1.5),
          "report": (re.compile(r"^export:"), 4.0)}


def phase_of(lines: list[str]) -> str:
    """Where a study was when it died, from the lines it printed: data preparation until a run's
    first progress line, training after it, export once the last run is done ("[N/N] ... done
    in"), the report after the export line."""
    lines = [ln for ln in lines if ln.strip()]
    if not any(ln.startswith("[") for ln in lines):
        return "data"
    if any(ln.startswith("export:") for ln in lines):
        return "report"
    return "export" if PHASES["export"][0].search(lines[-1]) else "training"


def _rows(out: Path) -> dict[tuple, list[float]]:
    """metrics.jsonl values of every run, by (run, step, task, eval set, metric)."""
    rows: dict[tuple, list[float]] = {}
    for path in sorted((out / "runs").glob("*/metrics.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            key = (r["run_id"], r["step"], r["task"], r.get("eval_set"), r["metric"])
            rows.setdefault(key, []).append(float(r["value"]))
    return rows


def _rel(a: float, b: float) -> float:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):  # NaN or ±inf against anything else
        return math.inf
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


#: fits.json keys whose numbers are measured durations, the wall-clock seconds a fit took:
#: `…/meta/timing_s/…` (the whole subtree), `…/meta/backtest/seconds` and
#: `…/meta/bootstrap/seconds` (fitting/laws/budget/chinchilla.py).
#: Two fits of the same table differ in them and only in them, so the comparison leaves out any
#: number under a key of these names (tests/fitting/test_report_reproducible.py checks that no
#: other number of a report differs between two writes of the same table).
DURATIONS = frozenset({"timing_s", "seconds"})


def is_duration(path: tuple) -> bool:
    """Whether the number at `path` (a tuple of keys and list indices, as :func:`numbers` gives
    it) is a measured duration: some key on the way is one of :data:`DURATIONS`."""
    return any(isinstance(k, str) and k in DURATIONS for k in path)


def numbers(node, path: tuple = ()) -> dict[tuple, float]:
    """Every number in a JSON document, by its path: the tuple of dict keys and list indices
    leading to it (booleans and strings left out; durations kept — see :func:`fits_numbers`)."""
    if isinstance(node, dict):
        return {k: v for key, sub in node.items() for k, v in numbers(sub, (*path, key)).items()}
    if isinstance(node, list):
        return {k: v for i, sub in enumerate(node) for k, v in numbers(sub, (*path, i)).items()}
    if isinstance(node, bool) or not isinstance(node, int | float):
        return {}
    return {path: float(node)}


def fits_numbers(path: Path) -> dict[tuple, float]:
    """The numbers of a fits.json that must be reproducible: all but the durations."""
    return {k: v for k, v in numbers(json.loads(path.read_text())).items() if not is_duration(k)}


def field_name(path: tuple) -> str:
    """A JSON path as one string: `chinchilla/fits/en-de/params/E`, `…/bootstrap_params[3][0]`."""
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else f"/{k}"
    return out.lstrip("/")


#: the columns of the row keys of metrics.jsonl (:func:`_rows`) and metrics.csv
#: (:func:`_csv_values`)
JSONL_KEY = ("run_id", "step", "task", "eval_set", "metric")
CSV_KEY = ("run_id", "pair", "eval_set", "metric", "step")


def _row_namer(columns: tuple[str, ...]):
    return lambda key: " ".join(f"{c}={v}" for c, v in zip(columns, key, strict=True))


def _csv_values(out: Path) -> dict[tuple, float]:
    with open(out / "metrics.csv", newline="") as f:
        return {(r["run_id"], r["pair"], r["eval_set"], r["metric"], r["step"]): float(r["value"])
                for r in csv.DictReader(f) if r["value"] not in ("", "nan")}


def largest_difference(ref: dict, got: dict, *, missing: bool = True,
                       name=field_name) -> tuple[float, dict | None]:
    """The largest relative difference between two {field: number} maps and where it is:
    `{"field": name(key), "reference": …, "trial": …}` (None when nothing differs; the first
    field in key order among equal differences). With `missing`, a field only one map has is an
    infinite difference (its absent value None); without, such fields are left out
    (metrics.jsonl: they are counted as rows lost or extra)."""
    worst, where = 0.0, None
    for k in sorted(ref.keys() & got.keys(), key=repr):
        d = _rel(ref[k], got[k])
        if d > worst:
            worst, where = d, {"field": name(k), "reference": ref[k], "trial": got[k]}
    if missing and ref.keys() != got.keys():
        k = min(ref.keys() ^ got.keys(), key=repr)
        worst, where = math.inf, {"field": name(k), "reference": ref.get(k), "trial": got.get(k)}
    return worst, where


def compare(ref: Path, out: Path) -> dict:
    """Rows lost and duplicated, and the largest relative differences, of `out` against `ref`:
    `max_rel_diff_X` and `largest_diff_X` (the field and its two values, None when equal) for
    X = metrics_jsonl, metrics_csv, fits_json; fits.json without its :data:`DURATIONS`."""
    want, got = _rows(ref), _rows(out)
    lost = sum(1 for k in want if k not in got)
    duplicated = sum(len(v) - 1 for v in got.values())
    extra = sum(1 for k in got if k not in want)
    result = {"rows_lost": lost, "rows_duplicated": duplicated, "rows_extra": extra}
    for file, (a, b, missing, name) in {
        "metrics_jsonl": ({k: v[0] for k, v in want.items()}, {k: v[0] for k, v in got.items()},
                          False, _row_namer(JSONL_KEY)),
        "metrics_csv": (_csv_values(ref), _csv_values(out), True, _row_namer(CSV_KEY)),
        "fits_json": (fits_numbers(ref / "report" / "fits.json"),
                      fits_numbers(out / "report" / "fits.json"), True, field_name),
    }.items():
        result[f"max_rel_diff_{file}"], result[f"largest_diff_{file}"] = \
            largest_difference(a, b, missing=missing, name=name)
    return result


def differences(result: dict, tolerance: float) -> list[str]:
    """One line per file of a trial whose largest difference exceeds `tolerance`, naming the
    field and both values; empty when the trial equals the reference."""
    lines = []
    for name, file in (("metrics_jsonl", "metrics.jsonl"), ("metrics_csv", "metrics.csv"),
                       ("fits_json", "report/fits.json")):
        diff, where = result[f"max_rel_diff_{name}"], result[f"largest_diff_{name}"]
        if diff > tolerance:
            ref, got = ("absent" if v is None else repr(v) for v in (where["reference"],
                                                                     where["trial"]))
            lines.append(f"{file}: {where['field']}: reference {ref}, trial {got} "
                         f"(relative difference {diff:.3g})")
    return lines


def _wait_for_line(proc: subprocess.Popen, log_path: Path, pattern: re.Pattern) -> bool:
    """Poll the study's log until a line matches `pattern`; False if the study ended first."""
    while proc.poll() is None:
        if any(pattern.search(ln) for ln in log_path.read_text(errors="replace").splitlines()):
            return True
        time.sleep(0.05)
    return False


def trial(index: int, seed: int, ref: Path, ref_seconds: float, root: Path,
          study_args: tuple[str, ...], timeout: float, phase: str = "any") -> dict:
    """One kill trial in `root/trial_<index>`; see the module docstring. With `phase` other than
    "any" the kill is due a random moment after that phase's line (:data:`PHASES`)."""
    rng = random.Random(seed * 1_000_003 + index)
    whole_group = index % 2 == 1
    out = root / f"trial_{index:03d}"
    log_path = root / f"trial_{index:03d}.log"
    start = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(out, study_args), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        if phase == "any":
            delay = rng.uniform(0.0, ref_seconds)
        else:
            pattern, window = PHASES[phase]
            _wait_for_line(proc, log_path, pattern)
            delay = time.monotonic() - start + rng.uniform(0.0, window)
        try:
            proc.wait(timeout=max(0.0, delay - (time.monotonic() - start)))
            killed = False  # finished before the kill was due
        except subprocess.TimeoutExpired:
            if whole_group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed = True
        phase = phase_of(log_path.read_text(errors="replace").splitlines()) if killed \
            else "finished"
        reruns = _run_to_completion(out, study_args, log, timeout)
    result = {"trial": index, "delay_s": round(delay, 2), "killed": killed,
              "kill": "process group" if whole_group else "study process", "phase": phase,
              "reruns": reruns, **compare(ref, out), "seconds": round(time.monotonic() - start, 1)}
    shutil.rmtree(out, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--parallel", type=int, default=1,
                    help="trials run side by side (default %(default)s)")
    ap.add_argument("--workers", default="1",
                    help="mnmt-study --workers for every study, the reference included")
    ap.add_argument("--gin", action="append", default=[],
                    help="a StudySpec binding for every study, the reference included (e.g. an "
                         "adaptive miniature: StudySpec.adaptive=True …)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the kill delays")
    ap.add_argument("--phase", choices=["any", *PHASES], default="any",
                    help="kill at a uniform moment of the whole study (any, default) or a "
                         "random moment just after the named phase begins")
    ap.add_argument("--tolerance", type=float, default=1e-6,
                    help="largest relative difference counted as equal (default %(default)g)")
    ap.add_argument("--dir", help="where the studies go (default: a temporary directory)")
    ap.add_argument("--reference", help="reuse the uninterrupted study DIR/reference of an "
                                        "earlier run of this script (same --workers)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    study_args = ("--workers", args.workers, *(f for g in args.gin for f in ("--gin", g)))
    root = Path(args.dir or tempfile.mkdtemp(prefix="mnmt_faults_")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if args.reference:  # an uninterrupted study of an earlier invocation, same --workers
        ref = Path(args.reference).resolve()
        ref_seconds = float(json.loads((ref / "faults_reference.json").read_text())["seconds"])
    else:
        ref = root / "reference"
        shutil.rmtree(ref, ignore_errors=True)
        start = time.monotonic()
        with open(root / "reference.log", "w") as log:
            _run_to_completion(ref, study_args, log, timeout=3600)
        ref_seconds = time.monotonic() - start
        (ref / "faults_reference.json").write_text(json.dumps({"seconds": ref_seconds}))
    print(f"reference: {ref_seconds:.0f} s", file=sys.stderr)
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = [pool.submit(trial, i, args.seed, ref, ref_seconds, root, study_args,
                               timeout=max(600.0, 10 * ref_seconds), phase=args.phase)
                   for i in range(args.trials)]
        for future in concurrent.futures.as_completed(futures):
            r = future.result()
            results.append(r)
            print(json.dumps(r), file=sys.stderr)
            for line in differences(r, args.tolerance):
                print(f"trial {r['trial']} differs from the reference: {line}", file=sys.stderr)
    results.sort(key=lambda r: r["trial"])
    equal = [r for r in results if not differences(r, args.tolerance)]
    totals = {"trials": len(results), "faults_injected": sum(r["killed"] for r in results),
              "recoveries": sum(r["killed"] for r in equal),
              "rows_lost": sum(r["rows_lost"] for r in results),
              "rows_duplicated": sum(r["rows_duplicated"] for r in results),
              "rows_extra": sum(r["rows_extra"] for r in results),
              "equal_to_reference": len(equal),
              "phases": dict(Counter(r["phase"] for r in results)),
              "seconds_per_trial": round(sum(r["seconds"] for r in results) / max(1, len(results)), 1),
              "reference_seconds": round(ref_seconds, 1)}
    report = {"benchmark": "faults", "machine": machine(), "settings": vars(args),
              "totals": totals, "trials": results}
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in totals.items():
            print(f"{key}: {value}")
    ok = totals["rows_lost"] == 0 and totals["rows_duplicated"] == 0 \
        and totals["equal_to_reference"] == totals["trials"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
