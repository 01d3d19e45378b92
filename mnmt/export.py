"""`mnmt-export`: run directories (local or gs://) → the tidy table of docs/reference/metrics_schema.md.

    mnmt-export runs/mini-1_p0.50_s0 runs/mini-2_p0.50_s0 --out table.csv
    mnmt-export 'gs://bucket/study/runs/*' --out table.parquet
    mnmt-export my_study/ --out table.csv        # every run directory below my_study/

A path that is not itself a run directory (no run.json) is searched for run directories below
it; glob patterns are expanded (with `tf.io.gfile` for URLs). The table is built by
`fitting.data.rundirs.collect_runs` and written by `fitting.data.tables.write_table` (CSV or Parquet by
extension).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fitting.data import io
from fitting.data.rundirs import collect_runs
from fitting.data.schema import RUN_JSON
from fitting.data.tables import write_table


def _find_below(root: str) -> list[str]:
    """Run directories below `root` (a run directory holds no other runs: not descended)."""
    found = []
    for dirpath, dirs, files in io.walk(root):
        if "run.json" in files:
            found.append(dirpath.rstrip("/"))
            dirs[:] = []
        dirs.sort()
    return sorted(found)


def expand_run_dirs(paths: Sequence[str]) -> list[str]:
    """Run directories named by `paths` (run dirs, parents of run dirs, or glob patterns)."""
    out: list[str] = []
    for p in paths:
        candidates = io.glob(p) if any(ch in p for ch in "*?[") else [p]
        if not candidates:
            raise FileNotFoundError(f"{p}: no such path (the pattern matched nothing)")
        for c in candidates:
            if io.exists(io.join(c, RUN_JSON)):
                out.append(c)
                continue
            below = _find_below(c)
            if not below:
                raise FileNotFoundError(f"{c}: not a run directory (no run.json) and no run "
                                        "directories below it")
            out.extend(below)
    seen, unique = set(), []
    for d in out:
        key = d.rstrip("/")
        if key not in seen:
            seen.add(key)
            unique.append(d)
    return unique


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mnmt-export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dirs", nargs="+", help="run directories, parents, or glob patterns")
    parser.add_argument("--out", required=True, help="output table: .csv, .csv.gz or .parquet")
    parser.add_argument("--final-only", action="store_true",
                        help="keep only rows at each run's last evaluated step")
    args = parser.parse_args(argv)
    try:
        dirs = expand_run_dirs(args.run_dirs)
        df = collect_runs(dirs)
        if args.final_only:
            df = df[df["final"]].reset_index(drop=True)
        write_table(df, args.out)
    except (FileNotFoundError, ValueError) as e:  # fitting's FitError names the file and line
        print(f"mnmt-export: error: {e}", file=sys.stderr)
        return 2
    print(f"mnmt-export: {len(df)} rows from {len(dirs)} run(s) -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
