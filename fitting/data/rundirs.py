"""Run directories (``run.json`` + ``metrics.jsonl``, docs/reference/metrics_schema.md) -> rows and the tidy
table.

* :func:`read_metrics_jsonl` / :func:`parse_metrics_jsonl`: the one reader of ``metrics.jsonl``
  (the training stack's resume logic uses it too); every row's fields are checked;
* :func:`final_losses_from_rows`: pair -> value at the last step of one (eval set, metric) series,
  the rule of the tidy table's ``final`` column, applied to rows;
* :func:`read_branch`: ``(parent_run, branch_step)`` of a cool-down branch's ``run.json``;
* :func:`read_run_dir`, :func:`collect_runs`: run directories -> the tidy table (a run stopped
  early, ``run.json`` status :data:`STOPPED`, has no ``final`` row: its last step is not its end).

Paths are local or remote (:mod:`fitting.data.io`). Errors are :class:`fitting.core.base.FitError` naming
the file, the line and the field: ``"PATH: line N: …"``.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from fitting.core.base import FitError
from fitting.data import io
from fitting.data.schema import BRANCH_FIELD, METRICS_FIELDS, METRICS_JSONL, RUN_JSON, TIDY_COLUMNS

__all__ = [
    "read_metrics_jsonl",
    "parse_metrics_jsonl",
    "final_losses_from_rows",
    "read_run_json",
    "read_branch",
    "read_run_dir",
    "collect_runs",
    "STOPPED",
]

#: run.json ``status`` of a run stopped early at a share of its steps (its rows are a prefix of
#: the full run's; ``planned_learning_rate`` rows carry the rates of the steps not trained)
STOPPED = "stopped"

_KEY = ("step", "task", "eval_set", "metric")


def parse_metrics_jsonl(
    text: str,
    *,
    source: str = METRICS_JSONL,
    ignore_torn_last_line: bool = False,
    run_id: str | None = None,
    unique_keys: bool = False,
) -> list[dict[str, Any]]:
    """The rows of ``metrics.jsonl`` content ``text``, in file order, as written (``value`` may be
    None: a non-finite measurement is stored as null). Blank lines are skipped.

    Every row must be a JSON object with the schema's fields and types (``run_id``, ``step``,
    ``tokens``, ``task``, ``eval_set``, ``metric``, ``value``); otherwise FitError
    ``"SOURCE: line N: …"``. With ``ignore_torn_last_line`` a final line without ``"\\n"`` (left by
    a killed writer) is dropped silently. With ``run_id``, a row naming another run is an error;
    with ``unique_keys``, two rows with the same ``(step, task, eval_set, metric)`` are.
    """
    lines = text.split("\n")
    if ignore_torn_last_line or text.endswith("\n"):
        lines = lines[:-1]  # the torn last line, or the empty string after the final "\n"
    rows: list[dict[str, Any]] = []
    linenos: list[int] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        rows.append(_check_row(line, lineno, source))
        linenos.append(lineno)
    if run_id is not None:
        for row, lineno in zip(rows, linenos, strict=True):
            if str(row["run_id"]) != run_id:
                raise FitError(
                    f"{source}: line {lineno}: run_id {row['run_id']!r} differs from run.json's "
                    f"{run_id!r}",
                    column="run_id",
                    row=lineno,
                    source=source,
                )
    if unique_keys:
        counts = Counter(tuple(r[k] for k in _KEY) for r in rows)
        for row, lineno in zip(rows, linenos, strict=True):
            if counts[tuple(row[k] for k in _KEY)] > 1:
                raise FitError(
                    f"{source}: line {lineno}: duplicate (step, task, eval_set, metric) = "
                    f"({row['step']}, {row['task']!r}, {row['eval_set']!r}, {row['metric']!r})",
                    row=lineno,
                    source=source,
                )
    return rows


def _check_row(line: str, lineno: int, source: str) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise FitError(f"{source}: line {lineno}: invalid JSON: {e.msg}", row=lineno,
                       source=source) from e
    except RecursionError:  # arrays/objects nested thousands deep
        raise FitError(f"{source}: line {lineno}: invalid JSON: nested too deeply; expected a "
                       "flat JSON object", row=lineno, source=source) from None
    if not isinstance(rec, dict):
        raise FitError(f"{source}: line {lineno}: expected a JSON object", row=lineno,
                       source=source)
    for key, types in METRICS_FIELDS.items():
        if key not in rec:
            raise FitError(f"{source}: line {lineno}: missing field {key!r}", column=key,
                           row=lineno, source=source)
        v = rec[key]
        if key == "value" and v is None:
            continue
        if key == "value" and isinstance(v, float) and not math.isfinite(v):
            # NaN / Infinity tokens (not JSON) or an overflowing literal such as 1e999
            raise FitError(f"{source}: line {lineno}: field 'value' should be a finite number "
                           f"or null (a non-finite measurement is written as null), got {v!r}",
                           column=key, row=lineno, source=source)
        if isinstance(v, bool) or not isinstance(v, types):
            raise FitError(
                f"{source}: line {lineno}: field {key!r} should be "
                f"{'/'.join(t.__name__ for t in types)}, got {v!r}",
                column=key,
                row=lineno,
                source=source,
            )
    return rec


def _read_utf8(path: str) -> str:
    """The file's text; FitError ``"PATH: line N: invalid UTF-8 …"`` for bytes that are not."""
    with io.open_file(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = data.count(b"\n", 0, e.start) + 1
        raise FitError(f"{path}: line {lineno}: invalid UTF-8 at byte {e.start} ({e.reason}); "
                       "expected UTF-8 text", row=lineno, source=path) from None


def read_metrics_jsonl(
    path: str | os.PathLike,
    *,
    ignore_torn_last_line: bool = False,
    run_id: str | None = None,
    unique_keys: bool = False,
) -> list[dict[str, Any]]:
    """The rows of the ``metrics.jsonl`` file at ``path`` (local or remote), checked as in
    :func:`parse_metrics_jsonl`; errors name the file and line. A missing file is a FitError."""
    path = os.fspath(path)
    if not io.exists(path):
        raise FitError(f"{path}: no such file", source=path)
    text = _read_utf8(path)
    return parse_metrics_jsonl(text, source=path, ignore_torn_last_line=ignore_torn_last_line,
                               run_id=run_id, unique_keys=unique_keys)


def final_losses_from_rows(
    rows: Iterable[Mapping[str, Any]], eval_set: str, metric: str = "loss"
) -> dict[str, float]:
    """pair (``task``) -> value at the last step that has ``metric`` rows for ``eval_set``.

    The rule of the tidy table's ``final`` column (the last step of the run's (eval_set, metric)
    series), on metrics.jsonl rows; null values are left out. ``{}`` when there are no such rows.
    """
    sel = [r for r in rows if r.get("metric") == metric and r.get("eval_set") == eval_set]
    if not sel:
        return {}
    last = max(int(r["step"]) for r in sel)
    return {str(r["task"]): float(r["value"]) for r in sel
            if int(r["step"]) == last and r["value"] is not None}


def _get(d: Mapping, dotted: str, source: str, default: Any = ...) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            if default is not ...:
                return default
            raise FitError(f"{source}: missing field {dotted!r}", column=dotted, source=source)
        cur = cur[part]
    return cur


def _numbers(meta: Mapping, dotted: str, source: str) -> dict[str, float | None]:
    """The object at ``dotted`` (``{}`` when absent or null): names -> numbers or null."""
    d = _get(meta, dotted, source, None)
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise FitError(f"{source}: field {dotted!r} should be an object, got {d!r}",
                       column=dotted, source=source)
    for k, v in d.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise FitError(f"{source}: field '{dotted}.{k}' should be a number or null, "
                           f"got {v!r}", column=f"{dotted}.{k}", source=source)
    return dict(d)


def read_run_json(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``run.json`` of ``run_dir`` as a dict; FitError when it is missing or not an object."""
    run_dir = os.fspath(run_dir)
    path = io.join(run_dir, RUN_JSON)
    if not io.exists(path):
        raise FitError(f"{path}: no such file (is {run_dir!r} a run directory?)", source=path)
    text = _read_utf8(path)
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise FitError(f"{path}: line {e.lineno}: invalid JSON: {e.msg}", source=path) from e
    except RecursionError:
        raise FitError(f"{path}: invalid JSON: nested too deeply", source=path) from None
    if not isinstance(meta, dict):
        raise FitError(f"{path}: expected a JSON object", source=path)
    return meta


def _seed_and_mixture(meta: Mapping, source: str) -> tuple[float | int, str]:
    """``training.seed`` (NaN when absent or null) and ``extra.mixture`` ("" when absent or null:
    runs written before schema revision 1.1 have neither); FitError for a value of another type."""
    seed = _get(meta, "training.seed", source, None)
    if seed is None:
        seed = math.nan
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise FitError(f"{source}: field 'training.seed' should be an int, got {seed!r}",
                       column="training.seed", source=source)
    mixture = _get(meta, "extra.mixture", source, None)
    if mixture is None:
        mixture = ""
    elif not isinstance(mixture, str):
        raise FitError(f"{source}: field 'extra.mixture' should be a str, got {mixture!r}",
                       column="extra.mixture", source=source)
    return seed, mixture


def _int_at_least_zero(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_branch(meta: Mapping, source: str = RUN_JSON) -> tuple[str, float | int]:
    """``(parent_run, branch_step)`` of a run.json (schema revision 1.2): the ``branch`` object
    of a cool-down branch (``{"parent": run_id, "step": b, "cooldown_steps": int}``), or
    ``("", NaN)`` for an ordinary run (``branch`` absent or null).

    FitError ``"SOURCE: field 'branch…' should be …"`` when it is present but malformed: not an
    object, ``parent`` not a non-empty str, ``step`` not an int ≥ 0, ``cooldown_steps`` (when
    given) not an int ≥ 0.
    """
    branch = meta.get(BRANCH_FIELD)
    if branch is None:
        return "", math.nan
    if not isinstance(branch, Mapping):
        raise FitError(f"{source}: field {BRANCH_FIELD!r} should be an object "
                       "{'parent': run_id, 'step': int, 'cooldown_steps': int} or null, got "
                       f"{branch!r}", column=BRANCH_FIELD, source=source)
    parent = branch.get("parent")
    if not isinstance(parent, str) or not parent:
        raise FitError(f"{source}: field '{BRANCH_FIELD}.parent' should be a non-empty str (the "
                       f"parent run's run_id), got {parent!r}", column=f"{BRANCH_FIELD}.parent",
                       source=source)
    step = branch.get("step")
    if not _int_at_least_zero(step):
        raise FitError(f"{source}: field '{BRANCH_FIELD}.step' should be an int ≥ 0 (the parent "
                       f"step the branch left from), got {step!r}", column=f"{BRANCH_FIELD}.step",
                       source=source)
    cooldown = branch.get("cooldown_steps")
    if cooldown is not None and not _int_at_least_zero(cooldown):
        raise FitError(f"{source}: field '{BRANCH_FIELD}.cooldown_steps' should be an int ≥ 0, "
                       f"got {cooldown!r}", column=f"{BRANCH_FIELD}.cooldown_steps",
                       source=source)
    return parent, step


def read_run_dir(run_dir: str | os.PathLike) -> pd.DataFrame:
    """One run directory (run.json + metrics.jsonl) -> its rows of the tidy table."""
    run_dir = os.fspath(run_dir)
    meta = read_run_json(run_dir)
    src = io.join(run_dir, RUN_JSON)
    params = _numbers(meta, "model.params", src)
    weights = _numbers(meta, "mixture.weights", src)
    caps = _numbers(meta, "mixture.caps", src)
    run_id = _get(meta, "run_id", src)
    if not isinstance(run_id, str):
        raise FitError(f"{src}: field 'run_id' should be a str, got {run_id!r}", column="run_id",
                       source=src)
    seed, mixture = _seed_and_mixture(meta, src)
    parent_run, branch_step = read_branch(meta, src)
    # Duplicates of (step, task, eval_set, metric) violate the schema: a resumed run must never
    # write one, so they fail loudly.
    metrics = read_metrics_jsonl(io.join(run_dir, METRICS_JSONL), run_id=run_id,
                                 unique_keys=True)
    recs = []
    for r in metrics:
        pair = r["task"]
        cap = caps.get(pair)
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
                "weight": math.nan if weights.get(pair) is None else float(weights[pair]),
                "data_size": math.nan if cap is None else float(cap),
                "seed": seed,
                "mixture": mixture,
                "parent_run": parent_run,
                "branch_step": branch_step,
                "eval_set": r["eval_set"],
                "metric": r["metric"],
                "step": int(r["step"]),
                "tokens": r["tokens"],
                "value": math.nan if r["value"] is None else float(r["value"]),
            }
        )
    df = pd.DataFrame.from_records(recs, columns=[c for c in TIDY_COLUMNS if c != "final"])
    if len(df):
        # "final": rows at the run's last evaluated step of that (pair, eval_set, metric) series
        # among evaluation metrics; train-only rows get their own last step.
        last = df.groupby(["eval_set", "metric"])["step"].transform("max")
        # a run stopped early (run.json status "stopped") has not reached its end: no final row
        df["final"] = (df["step"] == last) & (meta.get("status") != STOPPED)
    else:
        df["final"] = pd.Series(dtype=bool)
    return df


def collect_runs(run_dirs: str | os.PathLike | Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Collect run directories (local or remote) into the tidy table of the metrics schema."""
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
