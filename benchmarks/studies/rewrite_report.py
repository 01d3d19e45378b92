"""Write a finished study's report again, with whichever checkout's fitting code comes first on
PYTHONPATH, into another directory: the "before" and "after" of a fitting change, read on the
same trained runs.

The report gets the arguments `mnmt-study run` gives it (the study's spec, its held-out runs
and target sizes, its mixture constraints) and the ground truth from the study's own fits.json
(the data stage's exact irreducible loss). The study is only read. Checkouts from before the
report's options became one ``ReportOptions`` (88e85b9 and older) take the same arguments as
keywords (and their study specs keep the evaluation fields at the top); both are handled, so
one command gives both sides:

    PYTHONPATH=<old checkout> python benchmarks/studies/rewrite_report.py STUDY /tmp/before/seed30
    python benchmarks/studies/rewrite_report.py STUDY /tmp/after/seed30

Each writes DEST/report (report.md, fits.json, figures).
"""

from __future__ import annotations

import argparse
import json
import os


def report_arguments(out: str) -> dict:
    """The keyword arguments `mnmt-study run` gives `write_report` for the finished study ``out``
    (names shared by ``ReportOptions`` and the older flat keywords)."""
    from mnmt.study.expansion import expand  # noqa: PLC0415  (heavy: only when re-reporting)
    from mnmt.study.mesh_plan import spec_from_json  # noqa: PLC0415
    from mnmt.study.stages import mixture_constraints  # noqa: PLC0415

    with open(os.path.join(out, "study.json"), encoding="utf-8") as f:
        spec = spec_from_json(json.load(f))
    with open(os.path.join(out, "report", "fits.json"), encoding="utf-8") as f:
        truth = json.load(f).get("ground_truth")
    evaluation = getattr(spec, "evaluation", spec)   # older specs keep eval_sets at the top
    return {"ground_truth": truth, "target_sizes": list(spec.report_target_sizes),
            "title": f"Study {spec.name}", "eval_set": evaluation.eval_sets[0],
            "heldout_runs": [r.run_id for r in expand(spec) if r.heldout],
            "mixture_constraints": mixture_constraints(spec)}


def rewrite_report(out: str, dest: str) -> str:
    """Write study ``out``'s report into ``dest``/report with the fitting code on the path;
    returns that directory. ``out`` is never written."""
    from fitting.data.tables import read_table  # noqa: PLC0415
    from fitting.report import writer  # noqa: PLC0415

    table = read_table(os.path.join(out, "metrics.csv"))
    target = os.path.join(dest, "report")
    arguments = report_arguments(out)
    options = getattr(writer, "ReportOptions", None)
    if options is None:     # a checkout from before the options object: flat keywords
        writer.write_report(table, target, **arguments)
    else:
        writer.write_report(table, target, options(**arguments))
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", help="a finished study's output directory (holds report/fits.json)")
    ap.add_argument("dest", help="where to write the report (DEST/report)")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.study, "report", "fits.json")):
        ap.error(f"{args.study}: no report/fits.json (the study has not finished)")
    print(rewrite_report(args.study, args.dest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
