"""Run directories (run.json + metrics.jsonl, docs/metrics_schema.md) -> the tidy table.

Split out of :mod:`fitting.tables`, which re-exports :func:`collect_runs` and
:func:`read_run_dir`. Local paths, or ``gs://`` through a lazy ``tensorflow.io.gfile`` import.
Errors name the file, the line and the field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from fitting.base import FitError
from fitting.tables import TIDY_COLUMNS, _exists, _open

__all__ = ["collect_runs", "read_run_dir"]

_METRIC_FIELDS = {
    "step": (int,),
    "task": (str,),
    "eval_set": (str,),
    "metric": (str,),
    "value": (int, float),
}


def _get(d: Mapping, dotted: str, source: str, default: Any = ...) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            if default is not ...:
                return default
            raise FitError(f"{source}: missing field {dotted!r}", column=dotted, source=source)
        cur = cur[part]
    return cur


def _read_run_json(run_dir: str) -> dict:
    path = f"{run_dir.rstrip('/')}/run.json"
    if not _exists(path):
        raise FitError(f"{path}: no such file (is {run_dir!r} a run directory?)", source=path)
    with _open(path) as f:
        text = f.read()
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise FitError(f"{path}: line {e.lineno}: invalid JSON: {e.msg}", source=path) from e
    if not isinstance(meta, dict):
        raise FitError(f"{path}: expected a JSON object", source=path)
    return meta


def _read_metrics(path: str) -> list[dict]:
    rows: list[dict] = []
    if not _exists(path):
        raise FitError(f"{path}: no such file", source=path)
    with _open(path) as f:
        for lineno, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise FitError(f"{path}: line {lineno}: invalid JSON: {e.msg}", source=path) from e
            if not isinstance(rec, dict):
                raise FitError(f"{path}: line {lineno}: expected a JSON object", source=path)
            for key, types in _METRIC_FIELDS.items():
                if key not in rec:
                    raise FitError(
                        f"{path}: line {lineno}: missing field {key!r}", column=key, source=path
                    )
                v = rec[key]
                if isinstance(v, bool) or not isinstance(v, types):
                    if key == "value" and v is None:
                        v = math.nan  # a diverged evaluation written as null
                    else:
                        raise FitError(
                            f"{path}: line {lineno}: field {key!r} should be "
                            f"{'/'.join(t.__name__ for t in types)}, got {v!r}",
                            column=key,
                            source=path,
                        )
                rec[key] = v
            rec["_line"] = lineno
            rows.append(rec)
    return rows


def read_run_dir(run_dir: str | os.PathLike) -> pd.DataFrame:
    """One run directory (run.json + metrics.jsonl) -> its rows of the tidy table."""
    run_dir = os.fspath(run_dir)
    meta = _read_run_json(run_dir)
    src = f"{run_dir.rstrip('/')}/run.json"
    params = _get(meta, "model.params", src, {}) or {}
    weights = _get(meta, "mixture.weights", src, {}) or {}
    caps = _get(meta, "mixture.caps", src, {}) or {}
    run_id = str(_get(meta, "run_id", src))
    metrics = _read_metrics(f"{run_dir.rstrip('/')}/metrics.jsonl")
    mpath = f"{run_dir.rstrip('/')}/metrics.jsonl"
    recs = []
    for r in metrics:
        if "run_id" in r and str(r["run_id"]) != run_id:
            raise FitError(
                f"{mpath}: line {r['_line']}: run_id {r['run_id']!r} differs from run.json's "
                f"{run_id!r}",
                column="run_id",
                source=mpath,
            )
        pair = r["task"]
        cap = caps.get(pair) if isinstance(caps, Mapping) else None
        recs.append(
            {
                "run_id": run_id,
                "study": str(meta.get("study", "")),
                "family": str(_get(meta, "model.family", src, "")),
                "size": str(_get(meta, "model.size", src, "")),
                "n": params.get("non_embedding"),
                "n_enc": params.get("encoder"),
                "n_dec": params.get("decoder"),
                "pair": pair,
                "weight": float(weights[pair]) if pair in weights else math.nan,
                "data_size": math.nan if cap is None else float(cap),
                "eval_set": r["eval_set"],
                "metric": r["metric"],
                "step": int(r["step"]),
                "tokens": r.get("tokens"),
                "value": float(r["value"]),
            }
        )
    df = pd.DataFrame.from_records(recs, columns=[c for c in TIDY_COLUMNS if c != "final"])
    if len(df):
        # Duplicates of (step, task, eval_set, metric) violate the schema: keep the last, but say so
        # by failing loudly - a resumed run must never write one.
        dup = df.duplicated(["step", "pair", "eval_set", "metric"], keep=False)
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            raise FitError(
                f"{mpath}: line {metrics[i]['_line']}: duplicate (step, task, eval_set, metric) "
                f"= ({df.step.iat[i]}, {df.pair.iat[i]!r}, {df.eval_set.iat[i]!r}, "
                f"{df.metric.iat[i]!r})",
                source=mpath,
            )
        # "final": rows at the run's last evaluated step of that (pair, eval_set, metric) series
        # among evaluation metrics; train-only rows get their own last step.
        last = df.groupby(["eval_set", "metric"])["step"].transform("max")
        df["final"] = df["step"] == last
    else:
        df["final"] = pd.Series(dtype=bool)
    return df


def collect_runs(run_dirs: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Collect run directories (local or ``gs://``) into the tidy table of the metrics schema."""
    if isinstance(run_dirs, str | os.PathLike):
        run_dirs = [run_dirs]
    frames = [read_run_dir(d) for d in run_dirs]
    if not frames:
        raise FitError("collect_runs: no run directories given")
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return _coerce_tidy(df)


def _coerce_tidy(df: pd.DataFrame) -> pd.DataFrame:
    for c, kind in TIDY_COLUMNS.items():
        if c not in df.columns:
            continue
        if kind == "int":
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("Int64")
        elif kind == "float":
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
        elif kind == "bool":
            df[c] = df[c].astype(bool)
        else:
            df[c] = df[c].astype(str)
    return df.reset_index(drop=True)
