"""The run directory of docs/reference/metrics_schema.md: `run.json` and the append-only `metrics.jsonl`.

Both files are written through `tf.io.gfile`-compatible paths when the path is a URL
(`gs://…`), and through the local file system otherwise. `run.json` is always replaced
atomically (write to a temporary name, then rename), so a reader never sees half a file.
`metrics.jsonl` is append-only: on open, the rows already present are read (a torn last line
left by a SIGKILL is cut off), and a row whose `(step, task, eval_set, metric)` is already in
the file is never written again, so a resumed run neither duplicates nor loses rows. A write
that fails (a full disk: `fitting.data.io.NoSpaceError`, one line naming the file) leaves both files
as they were: `run.json` keeps its previous version, `metrics.jsonl` is cut back to its last
complete row.

A run file that is not valid JSON (a garbled `run.json`, a complete `metrics.jsonl` line that
does not parse, bytes that are not UTF-8) raises `RunFileError`, whose one-line message names
the file and the line; the trainer reads both files before it writes anything, so nothing is
overwritten.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from fitting.core.base import FitError
from fitting.data import io
from fitting.data.rundirs import parse_metrics_jsonl, read_metrics_jsonl
from fitting.data.schema import METRICS_JSONL, RUN_JSON

# Fields that must agree between an existing run.json and a run resuming into the directory.
_IDENTITY_FIELDS: tuple[tuple[str, ...], ...] = (
    ("model", "size"),
    ("model", "config"),
    ("model", "vocab_size"),
    ("mixture", "name"),
    ("mixture", "weights"),
    ("mixture", "caps"),
    ("training", "feature_lengths"),
    ("training", "batch_size"),
    ("training", "seed"),
    ("vocabulary", "sha256"),
    ("branch",),
)

_VERSION_PACKAGES = (
    "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "seqio", "tensorflow",
    "sentencepiece", "sacrebleu", "numpy", "gin-config", "mnmt-scaling",
)


class RunMismatchError(ValueError):
    """Raised when a MODEL_DIR's run.json describes a different run than the one requested."""


class RunFileError(ValueError):
    """A run file (run.json, metrics.jsonl) that cannot be read; the message (one line) names the
    file and the line."""


_REPAIR_HINT = "repair it to resume (nothing was written)"


def join(*parts: str) -> str:
    """`os.path.join` that also works for URLs (`fitting.data.io.join`)."""
    return io.join(*parts)


def file_sha256(path: str) -> str:
    """Hex SHA-256 of a file (the vocabulary's identity in run.json)."""
    digest = hashlib.sha256()
    with io.open_file(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    """Versions of the packages that determine a run's numbers (run.json `versions`)."""
    out = {"python": platform.python_version()}
    for name in _VERSION_PACKAGES:
        try:
            out["mnmt" if name == "mnmt-scaling" else name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def write_json_atomic(path: str, obj: Mapping[str, Any]) -> None:
    """Write `obj` as indented JSON to `path` via a temporary file and an atomic rename
    (`fitting.data.io.NoSpaceError` naming `path` on a full disk; the old file is left intact)."""
    io.write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False,
                                          default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_run_json(model_dir: str) -> dict[str, Any] | None:
    """The run.json of `model_dir`, or None when there is none."""
    path = join(model_dir, RUN_JSON)
    if not io.exists(path):
        return None
    with io.open_file(path, "rb") as f:
        data = f.read()
    try:
        run = json.loads(_decode(data, path))
    except json.JSONDecodeError as e:
        raise RunFileError(f"{path}: line {e.lineno}: not valid JSON ({e.msg}, column {e.colno}); "
                           f"{_REPAIR_HINT}") from e
    if not isinstance(run, dict):
        raise RunFileError(f"{path}: line 1: expected a JSON object, found "
                           f"{type(run).__name__}; {_REPAIR_HINT}")
    return run


def _decode(data: bytes, path: str) -> str:
    """`data` as UTF-8; RunFileError naming the line of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise RunFileError(f"{path}: line {line}: not UTF-8 text ({e.reason} at byte "
                           f"{e.start}); {_REPAIR_HINT}") from e


def write_run_json(model_dir: str, run: Mapping[str, Any]) -> None:
    write_json_atomic(join(model_dir, RUN_JSON), run)


def _get(d: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(d, Mapping) or k not in d:
            return None
        d = d[k]
    return d


def _normalise(value: Any) -> Any:
    """JSON round-trip so that tuples/lists and int/float keys compare as run.json stores them."""
    return json.loads(json.dumps(value, default=_json_default, sort_keys=True))


def check_compatible(existing: Mapping[str, Any], requested: Mapping[str, Any], path: str) -> None:
    """Refuse to resume into a directory that describes a different model, mixture or vocabulary.

    Raises `RunMismatchError` listing every differing field with both values.
    """
    diffs = []
    for keys in _IDENTITY_FIELDS:
        old, new = _normalise(_get(existing, keys)), _normalise(_get(requested, keys))
        if old != new:
            diffs.append(f"  {'.'.join(keys)}: directory has {json.dumps(old)}, "
                         f"this run asks for {json.dumps(new)}")
    if diffs:
        raise RunMismatchError(
            f"{path} already holds a different run; refusing to resume into it. Differences:\n"
            + "\n".join(diffs)
            + "\nUse a fresh MODEL_DIR (or delete this one) to start the new run."
        )


class MetricsWriter:
    """Append-only writer of `metrics.jsonl` rows that skips keys already in the file.

    Every process of a multi-host job reads the file (so all take the same skip decisions);
    only the one constructed with `enabled=True` (the primary) writes or repairs it.
    """

    def __init__(self, model_dir: str, run_id: str, *, enabled: bool = True):
        self.path = join(model_dir, METRICS_JSONL)
        self.run_id = run_id
        self.enabled = enabled
        self._seen: set[tuple[int, str, str, str]] = set()
        self._load_and_repair()

    def _load_and_repair(self) -> None:
        if not io.exists(self.path):
            return
        with io.open_file(self.path, "rb") as f:
            data = f.read()
        keep = data if data.endswith(b"\n") or not data else data[: data.rfind(b"\n") + 1]
        try:
            rows = parse_metrics_jsonl(_decode(keep, self.path), source=self.path)
        except FitError as e:  # "PATH: line N: ...", a complete line that is not a row
            raise RunFileError(f"{str(e).splitlines()[0]}; {_REPAIR_HINT}") from e
        self._seen.update(_key(row) for row in rows)
        if len(keep) != len(data) and self.enabled:  # a torn final line from a killed writer: drop it
            if io.is_remote(self.path):
                with io.open_file(self.path, "wb") as f:
                    f.write(keep)
            else:
                with open(self.path, "r+b") as f:
                    f.truncate(len(keep))

    def __contains__(self, key: tuple[int, str, str, str]) -> bool:
        return key in self._seen

    def has(self, step: int, task: str, eval_set: str, metric: str) -> bool:
        return (int(step), task, eval_set, metric) in self._seen

    def write(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Append the rows not yet in the file; returns how many were written.

        All or nothing: when the append fails (`fitting.data.io.NoSpaceError` on a full disk), the
        file is cut back to its previous length and the rows count as not written."""
        lines: list[str] = []
        new_keys: list[tuple[int, str, str, str]] = []
        for row in rows:
            full = {
                "run_id": self.run_id,
                "step": int(row["step"]),
                "tokens": int(row["tokens"]),
                "task": str(row["task"]),
                "eval_set": str(row["eval_set"]),
                "metric": str(row["metric"]),
                "value": _finite_or_none(row["value"]),
            }
            key = _key(full)
            if key in self._seen or key in new_keys:
                continue
            new_keys.append(key)
            lines.append(json.dumps(full) + "\n")
        if lines and self.enabled:
            data = "".join(lines).encode("utf-8")
            if io.is_remote(self.path):  # object stores cannot append: rewrite the whole object
                old = b""
                if io.exists(self.path):
                    with io.open_file(self.path, "rb") as f:
                        old = f.read()
                with io.open_file(self.path, "wb") as f:
                    f.write(old + data)
            else:
                append_whole(self.path, data)
        self._seen.update(new_keys)  # only once the rows are on disk
        return len(lines) if self.enabled else 0


def append_whole(path: str, data: bytes) -> None:
    """Append `data` to the local file `path` and fsync it, all or nothing: after a failed or
    short write the file is truncated back to its previous length, so it never ends in part of
    a line. A full disk raises `fitting.data.io.NoSpaceError` naming `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    start = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, start)
        if io.is_no_space(err):
            raise io.NoSpaceError(path, f" (appending {len(data)} bytes)") from err
        raise
    finally:
        os.close(fd)


def _finite_or_none(value: Any) -> float | None:
    v = float(value)
    return v if math.isfinite(v) else None


def _key(row: Mapping[str, Any]) -> tuple[int, str, str, str]:
    return (int(row["step"]), str(row["task"]), str(row["eval_set"]), str(row["metric"]))


def read_metrics(model_dir: str) -> list[dict[str, Any]]:
    """All complete rows of `metrics.jsonl` (a torn last line is ignored); [] before the first."""
    path = join(model_dir, METRICS_JSONL)
    if not io.exists(path):
        return []
    return read_metrics_jsonl(path, ignore_torn_last_line=True)
