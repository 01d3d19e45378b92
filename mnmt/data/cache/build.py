"""Build a task's token cache with an Apache Beam pipeline (SeqIO's ``cache_tasks`` engine).

The pipeline has one element per *part*: part ``p`` of ``P`` reads the task's split once, keeps
the examples ``i`` of its shards (example ``i`` goes to shard ``i % S``; part ``p`` writes the
shards ``s % P == p``), tokenizes them in batches with the study's SentencePiece model and writes
them, then a small JSON summary. The driver merges the summaries into ``index.json``, writes ``COMPLETED``
and renames the temporary directory into place, so a killed or failed build leaves no directory
a reader would take.

By default the pipeline runs on Beam's portable local runner over all cores
(``--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=<cores>``);
any other Beam options (``--runner=DataflowRunner --project=… --region=… --temp_location=gs://…``,
or Flink/Spark job-server options) replace them unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import re
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from mnmt.data.cache import layout
from mnmt.data.cache.layout import CacheError, CacheIndex

__all__ = ["build_cache", "CacheBuildError", "cache_status", "default_num_parts",
           "default_num_shards",
           "expected_identity", "DEFAULT_GROUP_SIZE"]

# ArrayRecord records per chunk: 32 keeps the reader's index at a few bytes per example (group
# size 1 costs ≈ 35 B/example in memory and is slower on random reads of small records here:
# benchmarks/RESULTS.md).
DEFAULT_GROUP_SIZE = 32
_ENCODE_BATCH = 2048
SMALL_SPLIT = 200_000
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "PrismRunner")
_ERROR_MARK = "mnmt-cache error: "


class CacheBuildError(CacheError):
    """A build that failed (message: the file, what happened, what to do)."""


def default_num_parts(examples: int | None) -> int:
    """One part per core, except for a split known to be small (under
    :data:`SMALL_SPLIT` examples), which one in-process part writes faster than worker
    processes start."""
    if examples is not None and examples < SMALL_SPLIT:
        return 1
    return os.cpu_count() or 1


def default_num_shards(num_parts: int) -> int:
    """At least 16 shards, a multiple of the number of parts (so parts write equal shares)."""
    return num_parts * max(1, -(-16 // num_parts))


def expected_identity(info: Any) -> dict[str, Any]:
    """What a cache of this task must have been built from: the vocabulary's digest and size,
    the source's fingerprint, and the ids the reader uses."""
    from mnmt.data.vocab import get_vocabulary, has_separator, language_token_id, separator_id

    vocab = get_vocabulary(info.vocab_path)
    return {
        "vocabulary": {"path": info.vocab_path, "sha256": layout.file_sha256(info.vocab_path),
                       "size": int(vocab.vocab_size)},
        "fingerprint": layout.source_fingerprint(info.definition),
        "language_id": int(language_token_id(vocab, info.target_language)),
        "eos_id": int(vocab.eos_id),
        "separator_id": int(separator_id(vocab)) if has_separator(vocab) else None,
    }


def cache_status(index: CacheIndex | None, identity: dict[str, Any]) -> str:
    """"" when a complete cache matches ``identity``; otherwise why it must be (re)built."""
    if index is None:
        return "no complete cache"
    if index.version != layout.CACHE_VERSION:
        return f"layout version {index.version}, this code reads {layout.CACHE_VERSION}"
    if index.vocabulary.get("sha256") != identity["vocabulary"]["sha256"]:
        return (f"built with another vocabulary ({index.vocabulary.get('path')}, sha256 "
                f"{str(index.vocabulary.get('sha256'))[:12]}…; the task uses "
                f"{identity['vocabulary']['path']}, {identity['vocabulary']['sha256'][:12]}…)")
    if index.source.get("fingerprint") != identity["fingerprint"]:
        return "built from another source (the task's definition or its files changed)"
    return ""


def read_complete_index(directory: str) -> CacheIndex | None:
    """The index of a complete cache directory, or None when it has no ``COMPLETED`` marker."""
    if not os.path.exists(os.path.join(directory, layout.COMPLETED_FILE)):
        return None
    return CacheIndex.read(os.path.join(directory, layout.INDEX_FILE))


@dataclasses.dataclass(frozen=True)
class _PartJob:
    """Everything a Beam worker needs to write one part (pickled to the worker)."""

    task: str
    split: str
    stream: Callable[..., Iterator[tuple[str, str]]]
    spm_model: bytes
    language_id: int
    dtype: str
    num_parts: int
    num_shards: int
    group_size: int
    out_dir: str


def _write_part(job: _PartJob, part: int) -> dict[str, Any]:
    """Tokenize and write the shards of one part; returns its summary (also written as JSON)."""
    import sentencepiece as spm
    from array_record.python.array_record_module import ArrayRecordWriter

    from mnmt.data.stream_workers import make_encoder

    # ids as the training pipeline's encoder gives them: SentencePiece, spaced text through a
    # per-word cache (equal to EncodeAsIds; several times faster on Zipf-distributed words)
    encode = make_encoder(spm.SentencePieceProcessor(model_proto=job.spm_model))
    shards = list(range(part, job.num_shards, job.num_parts))
    paths = {s: os.path.join(job.out_dir, layout.shard_name(job.split, s, job.num_shards))
             for s in shards}
    writers = {s: ArrayRecordWriter(paths[s], f"group_size:{job.group_size}") for s in shards}
    counts = dict.fromkeys(shards, 0)
    lengths: dict[str, list[np.ndarray]] = {"inputs": [], "targets": []}
    batch: list[tuple[int, str, str]] = []
    read = 0

    def flush() -> None:
        sources = [encode(s) for _, s, _ in batch]
        targets = [encode(t) for _, _, t in batch]
        for (i, _, _), src, tgt in zip(batch, sources, targets, strict=True):
            shard = i % job.num_shards
            inputs = [job.language_id, *src]
            writers[shard].write(layout.encode_example(inputs, tgt, job.dtype))
            counts[shard] += 1
        lengths["inputs"].append(np.fromiter((len(s) + 1 for s in sources), np.int64))
        lengths["targets"].append(np.fromiter((len(t) for t in targets), np.int64))
        batch.clear()

    try:
        for i, (source, target) in enumerate(job.stream(job.split, 0, None)):
            read = i + 1
            if i % job.num_shards % job.num_parts == part:  # its shard is one of this part's
                batch.append((i, source, target))
                if len(batch) >= _ENCODE_BATCH:
                    flush()
        if batch:
            flush()
        for writer in writers.values():
            writer.close()
    except (OSError, RuntimeError) as err:  # ArrayRecord reports write errors as RuntimeError
        full = getattr(err, "errno", None) == errno.ENOSPC or "No space left" in str(err)
        what = "no space left on device" if full else str(err).splitlines()[0]
        raise CacheBuildError(f"{_ERROR_MARK}{job.out_dir}: {what} while writing part {part} "
                              f"of task {job.task!r}; free space and build again (nothing "
                              "was replaced)") from err
    per_side = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in lengths.items()}
    summary = {
        "part": part,
        "shards": {str(s): {"examples": counts[s], "bytes": os.path.getsize(paths[s]),
                            "sha256": layout.file_sha256(paths[s])} for s in shards},
        "tokens": {k: int(v.sum()) for k, v in per_side.items()},
        "max_length": {k: int(v.max(initial=0)) for k, v in per_side.items()},
        "length_histogram": {k: layout.length_histogram(v) for k, v in per_side.items()},
        "read": read,
    }
    with open(os.path.join(job.out_dir, f"part-{part:05d}.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f)
    return summary


def _run_pipeline(job: _PartJob, beam_args: Sequence[str], log_path: str) -> str:
    """Run the Beam pipeline over the parts; returns the runner's name. The local runner's
    worker processes write their logs to ``log_path`` instead of the terminal."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(beam_args)
    if not any(a.startswith("--runner") for a in args):
        mode = "multi_processing" if job.num_parts > 1 else "in_memory"
        args = ["--runner=FnApiRunner", f"--direct_running_mode={mode}",
                f"--direct_num_workers={job.num_parts}", *args]
    if not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=WARNING")  # workers: no per-bundle INFO
    if not any(a.startswith("--pickle_library") for a in args):
        args.append("--pickle_library=cloudpickle")  # the task's reader is a closure
    options = PipelineOptions(args)
    runner = next(a.split("=", 1)[1] for a in args if a.startswith("--runner"))
    workers = runner if "--direct_running_mode=multi_processing" in args else "in-process"
    with (_driver_path_for_local_workers(runner), _stderr_to(log_path, workers),
          beam.Pipeline(options=options) as pipeline):
        _ = (pipeline
             | "parts" >> beam.Create(list(range(job.num_parts)))
             | "spread" >> beam.Reshuffle()
             | "write" >> beam.Map(lambda part, j=job: _write_part(j, part)["part"]))
    return runner


@contextlib.contextmanager
def _stderr_to(path: str, runner: str) -> Iterator[None]:
    """Send this process's standard error (inherited by local Beam workers) to ``path``."""
    if runner not in LOCAL_RUNNERS:
        yield
        return
    from mnmt.tensorflow_setup import native_stderr_to

    with open(path, "ab") as log_file, native_stderr_to(log_file):
        yield


@contextlib.contextmanager
def _driver_path_for_local_workers(runner: str) -> Iterator[None]:
    """Let the local runner's worker processes import what the driver imports (the task's
    reader may live in a module found through the driver's ``sys.path``, e.g. a user's task
    module next to the study file); remote runners ship code their own way."""
    if runner not in LOCAL_RUNNERS:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    entries = [p for p in sys.path if p and os.path.isdir(p)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        [*entries, *(before.split(os.pathsep) if before else [])]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _failure_line(err: BaseException) -> str:
    """The one-line message of a worker's CacheBuildError inside a runner's wrapped error."""
    match = re.search(re.escape(_ERROR_MARK) + r"(.*)", str(err))
    return match.group(1).strip() if match else ""


def _merge(job: _PartJob, identity: dict[str, Any], info: Any, runner: str, seconds: float,
           ) -> CacheIndex:
    """index.json's contents from the parts' summaries."""
    import apache_beam as beam

    parts = []
    for part in range(job.num_parts):
        path = os.path.join(job.out_dir, f"part-{part:05d}.json")
        if not os.path.exists(path):
            raise CacheBuildError(f"{path}: missing after the pipeline finished; build again")
        with open(path, encoding="utf-8") as f:
            parts.append(json.load(f))
    shards = {int(s): v for p in parts for s, v in p["shards"].items()}
    sides = ("inputs", "targets")
    return CacheIndex(
        version=layout.CACHE_VERSION, task=job.task, pair=info.pair, split=job.split,
        examples=sum(v["examples"] for v in shards.values()), num_shards=job.num_shards,
        shard_examples=[shards[s]["examples"] for s in range(job.num_shards)],
        shard_bytes=[shards[s]["bytes"] for s in range(job.num_shards)],
        shard_sha256=[shards[s]["sha256"] for s in range(job.num_shards)],
        tokens={k: sum(p["tokens"][k] for p in parts) for k in sides},
        max_length={k: max(p["max_length"][k] for p in parts) for k in sides},
        length_histogram={k: np.sum([p["length_histogram"][k] for p in parts], axis=0)
                          .astype(int).tolist() for k in sides},
        dtype=job.dtype, vocabulary=identity["vocabulary"], language_id=identity["language_id"],
        eos_id=identity["eos_id"], separator_id=identity["separator_id"],
        source={"definition": json.loads(json.dumps(info.definition, default=str)),
                "fingerprint": identity["fingerprint"]},
        group_size=job.group_size,
        build={"engine": f"apache_beam {beam.__version__}", "runner": runner,
               "parts": job.num_parts, "seconds": round(seconds, 3),
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    )


def _remove_stale_builds(cache_dir: str, task: str) -> None:
    """Delete temporary directories of this task's builds killed on this host."""
    host = socket.gethostname()
    pattern = re.compile(re.escape(task) + r"\.tmp-(.+)-(\d+)-[0-9a-f]+$")
    for name in os.listdir(cache_dir):
        match = pattern.match(name)
        if not match or match.group(1) != host:
            continue
        try:
            os.kill(int(match.group(2)), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)
        except PermissionError:
            pass


def _install(tmp: str, final: str) -> None:
    """Put a complete build in place of the previous cache (if any)."""
    old = None
    if os.path.exists(final):
        old = f"{final}.old-{secrets.token_hex(4)}"
        os.replace(final, old)
    os.replace(tmp, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def build_cache(
    task_name: str,
    cache_dir: str,
    *,
    split: str = "train",
    num_shards: int | None = None,
    num_parts: int | None = None,
    beam_args: Sequence[str] = (),
    group_size: int = DEFAULT_GROUP_SIZE,
    force: bool = False,
    log: Callable[[str], None] | None = None,
) -> CacheIndex:
    """Build (or find up to date) the cache of a registered task's ``split`` under
    ``<cache_dir>/<task_name>/`` → its :class:`CacheIndex`.

    Skipped when a complete cache was built from the same vocabulary and source (and, when
    given, ``num_shards``) unless ``force``; a changed vocabulary, source or shard count
    rebuilds it. ``num_parts``: parallel readers (default :func:`default_num_parts`: the
    machine's cores; at most ``num_shards``); ``num_shards``: files (default
    :func:`default_num_shards`; a multiple of the number of hosts that will read it);
    ``beam_args``: Beam pipeline options replacing the local default runner.
    """
    from fitting.data.io import is_remote
    from mnmt.data.tasks import get_task_info
    from mnmt.data.vocab import get_vocabulary

    if is_remote(str(cache_dir)):
        raise CacheError(f"cache_dir {cache_dir}: token caches are local ArrayRecord files; use a "
                         "local or mounted directory (e.g. a bucket mounted with GCS FUSE)")
    say = log or (lambda text: None)
    info = get_task_info(task_name)
    if split not in info.splits:
        raise CacheError(f"task {task_name!r} has no split {split!r} (has {list(info.splits)})")
    if info.text_stream is None:
        raise CacheError(f"task {task_name!r} has no text stream to cache")
    final = layout.task_cache_dir(cache_dir, task_name)
    identity = expected_identity(info)
    current = read_complete_index(final) if os.path.isdir(final) else None
    reason = cache_status(current, identity)
    if not reason and num_shards and current.num_shards != num_shards:
        reason = f"{current.num_shards} shards, {num_shards} asked for"
    if not reason and current.split == split and not force:
        say(f"cache: {task_name} up to date ({current.examples:,} examples, {final})")
        return current
    parts = int(num_parts or default_num_parts(info.train_size))
    shards = int(num_shards or default_num_shards(parts))
    if parts < 1 or shards < 1:
        raise CacheError(f"num_shards {shards} and num_parts {parts}: expected positive counts")
    parts = min(parts, shards)  # a part writes whole shards
    os.makedirs(cache_dir, exist_ok=True)
    _remove_stale_builds(cache_dir, task_name)
    tmp = f"{final}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    os.makedirs(tmp)
    vocab = get_vocabulary(info.vocab_path)
    job = _PartJob(task=task_name, split=split, stream=info.text_stream,
                   spm_model=vocab.tokenizer.serialized_model_proto(),
                   language_id=identity["language_id"], dtype=layout.ids_dtype(vocab.vocab_size),
                   num_parts=parts, num_shards=shards, group_size=int(group_size), out_dir=tmp)
    say(f"cache: building {task_name} ({'forced' if force and not reason else reason}) into "
        f"{shards} shards with {parts} Beam worker(s)")
    start = time.perf_counter()
    log_path = f"{final}.build.log"
    try:
        runner = _run_pipeline(job, beam_args, log_path)
        index = _merge(job, identity, info, runner, time.perf_counter() - start)
        if index.examples == 0:
            raise CacheBuildError(f"task {task_name!r}: split {split!r} has no examples to cache")
        with open(os.path.join(tmp, layout.INDEX_FILE), "w", encoding="utf-8") as f:
            f.write(index.to_json())
        for part in range(parts):
            os.remove(os.path.join(tmp, f"part-{part:05d}.json"))
        with open(os.path.join(tmp, layout.COMPLETED_FILE), "w", encoding="utf-8") as f:
            f.write(index.build["created"] + "\n")
        _install(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, CacheBuildError):
            raise CacheBuildError(_failure_line(err) or str(err)) from None
        line = _failure_line(err)
        if line:
            raise CacheBuildError(line) from None
        if isinstance(err, Exception):
            last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
            raise CacheBuildError(f"building the cache of {task_name!r} failed: {last[0]} "
                                  f"(the Beam workers' log: {log_path})") from err
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            raise CacheBuildError(f"{tmp}: no space left on device while finishing the cache "
                                  f"of {task_name!r}; free space and build again (nothing was "
                                  "replaced)") from None
        raise
    seconds = index.build["seconds"]
    say(f"cache: {task_name}: {index.examples:,} examples, "
        f"{sum(index.tokens.values()):,} tokens in {seconds:.1f} s "
        f"({index.examples / max(seconds, 1e-9):,.0f} pairs/s) -> {final}")
    return index
