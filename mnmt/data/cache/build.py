"""Build a task's token cache with an Apache Beam pipeline (SeqIO's ``cache_tasks`` engine).

The split is cut into ``P`` contiguous blocks, one per *part* (the task's
:class:`~mnmt.data.sources.parts.SplitParts`: byte ranges of a TSV file, line ranges of aligned
or gzip files, example ranges of a TFDS split or of an in-memory split), so each part reads
only its share of the source. Stage one: part ``p`` reads its block, tokenizes it in batches
with the study's SentencePiece model and writes its ``j``-th example into piece ``j % S``.
Stage two (once every part's count is known): shard ``s`` is the concatenation, in part
order, of each part's piece ``(s - i0_p) mod S``, where ``i0_p`` is the number of examples
before part ``p``'s block — so example ``i`` of the split is in shard ``i % S``, in order,
whatever ``P`` (a 1-part and a P-part build write identical shards). What each part read
(examples, bytes) is recorded in ``index.json``'s ``build["read"]``.

The driver merges the summaries into ``index.json``, writes ``COMPLETED`` and renames the
temporary directory into place, so a killed or failed build (a full disk included) leaves no
directory a reader would take.

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
from mnmt.data.sources.parts import ReadCount, split_parts

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
    """Everything a Beam worker needs to write one part or one shard (pickled to the worker)."""

    task: str
    split: str
    reader: Any  # the task's SplitParts (mnmt.data.sources.parts)
    blocks: tuple  # one block of the split per part, in order
    spm_model: bytes
    language_id: int
    dtype: str
    num_shards: int
    group_size: int
    out_dir: str

    @property
    def num_parts(self) -> int:
        return len(self.blocks)

    def shard_path(self, shard: int) -> str:
        return os.path.join(self.out_dir, layout.shard_name(self.split, shard, self.num_shards))

    def piece_path(self, part: int, residue: int) -> str:
        """The file of part ``part``'s examples ``j`` with ``j % S == residue`` (its shard
        itself when there is one part)."""
        path = self.shard_path(residue)
        return path if self.num_parts == 1 else f"{path}.part-{part:05d}"


def _write_error(job: _PartJob, err: BaseException, what: str) -> CacheBuildError:
    """The one-line error of a failed write in a worker (marked so the driver finds it in the
    runner's wrapped error): no space left, or the error's first line."""
    if _is_no_space(err):
        return CacheBuildError(_ERROR_MARK + _no_space(job.task, job.out_dir, what))
    return CacheBuildError(f"{_ERROR_MARK}{job.out_dir}: {str(err).splitlines()[0]} while "
                           f"{what} of task {job.task!r}; build again (nothing was replaced)")


def _is_no_space(err: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) is ENOSPC; ArrayRecord's writer reports
    it as a RuntimeError whose text says so."""
    seen = 0
    while err is not None and seen < 8:
        if getattr(err, "errno", None) == errno.ENOSPC or "No space left on device" in str(err):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _no_space(task: str, tmp: str, what: str) -> str:
    """The message of a build that ran out of space: where, what to do, what was kept."""
    cache_dir = os.path.dirname(os.path.abspath(tmp))
    return (f"{cache_dir}: no space left on device while {what} of the cache of task {task!r}; "
            f"free space on that file system (or build into another cache_dir) and build again "
            f"— the unfinished build ({os.path.basename(tmp)}) was removed and the previous "
            "cache, if any, is unchanged")


def _write_part(job: _PartJob, part: int) -> dict[str, Any]:
    """Read, tokenize and write one part's block of the split: its examples ``j`` (in block
    order) into piece ``j % S``; returns its summary (also written as JSON)."""
    import sentencepiece as spm
    from array_record.python.array_record_module import ArrayRecordWriter

    from mnmt.data.sources.parts import ReadCount
    from mnmt.data.stream_workers import make_encoder

    # ids as the training pipeline's encoder gives them: SentencePiece, spaced text through a
    # per-word cache (equal to EncodeAsIds; several times faster on Zipf-distributed words)
    encode = make_encoder(spm.SentencePieceProcessor(model_proto=job.spm_model))
    shards = job.num_shards
    counts = [0] * shards
    lengths: dict[str, list[np.ndarray]] = {"inputs": [], "targets": []}
    batch: list[tuple[str, str]] = []
    read = ReadCount()
    seen = 0

    def flush(writers) -> None:
        nonlocal seen
        sources = [encode(s) for s, _ in batch]
        targets = [encode(t) for _, t in batch]
        for src, tgt in zip(sources, targets, strict=True):
            residue = seen % shards
            writers[residue].write(layout.encode_example([job.language_id, *src], tgt, job.dtype))
            counts[residue] += 1
            seen += 1
        lengths["inputs"].append(np.fromiter((len(s) + 1 for s in sources), np.int64))
        lengths["targets"].append(np.fromiter((len(t) for t in targets), np.int64))
        batch.clear()

    try:
        writers = [ArrayRecordWriter(job.piece_path(part, r), f"group_size:{job.group_size}")
                   for r in range(shards)]
        for pair in job.reader.read(job.split, job.blocks[part], read):
            batch.append(pair)
            if len(batch) >= _ENCODE_BATCH:
                flush(writers)
        if batch:
            flush(writers)
        for writer in writers:
            writer.close()
        per_side = {k: np.concatenate(v) if v else np.zeros(0, np.int64)
                    for k, v in lengths.items()}
        summary = {
            "part": part, "examples": seen, "pieces": counts,
            "tokens": {k: int(v.sum()) for k, v in per_side.items()},
            "max_length": {k: int(v.max(initial=0)) for k, v in per_side.items()},
            "length_histogram": {k: layout.length_histogram(v) for k, v in per_side.items()},
            "read": dataclasses.asdict(read),
        }
        _write_json(os.path.join(job.out_dir, f"part-{part:05d}.json"), summary)
    except (OSError, RuntimeError) as err:  # ArrayRecord reports write errors as RuntimeError
        raise _write_error(job, err, f"writing part {part} of {job.num_parts}") from err
    return summary


def _write_json(path: str, value: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)


def _merge_shard(job: _PartJob, shard: int, examples: Sequence[tuple[int, int]]) -> int:
    """Write shard ``s`` from the parts' pieces: part ``p``'s block starts at example
    ``i0 = Σ examples of the parts before it``, so its example ``j`` is example ``i0 + j`` of the
    split and shard ``s`` takes its piece ``(s - i0) mod S``; the pieces in part order are the
    shard's examples in split order. Writes the shard's summary; returns the shard."""
    from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

    counts = dict(examples)
    starts = np.concatenate([[0], np.cumsum([counts[p] for p in range(job.num_parts)])])
    path = job.shard_path(shard)
    written = 0
    try:
        if job.num_parts > 1:
            writer = ArrayRecordWriter(path, f"group_size:{job.group_size}")
            for part in range(job.num_parts):
                piece = job.piece_path(part, (shard - int(starts[part])) % job.num_shards)
                reader = ArrayRecordReader(piece)
                n = reader.num_records()
                for lo in range(0, n, 4096):
                    for record in reader.read(lo, min(n, lo + 4096)):
                        writer.write(record)
                reader.close()
                written += n
                os.remove(piece)
            writer.close()
        else:
            reader = ArrayRecordReader(path)
            written = reader.num_records()
            reader.close()
        _write_json(os.path.join(job.out_dir, f"shard-{shard:05d}.json"),
                    {"examples": written, "bytes": os.path.getsize(path),
                     "sha256": layout.file_sha256(path)})
    except (OSError, RuntimeError) as err:
        raise _write_error(job, err, f"writing shard {shard} of {job.num_shards}") from err
    return shard


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
        examples = (pipeline
                    | "parts" >> beam.Create(list(range(job.num_parts)))
                    | "spread parts" >> beam.Reshuffle()
                    | "write parts" >> beam.Map(
                        lambda part, j=job: (part, _write_part(j, part)["examples"])))
        _ = (pipeline
             | "shards" >> beam.Create(list(range(job.num_shards)))
             | "spread shards" >> beam.Reshuffle()
             | "merge shards" >> beam.Map(lambda shard, ex, j=job: _merge_shard(j, shard, ex),
                                          ex=beam.pvalue.AsList(examples)))
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


def _summaries(job: _PartJob, prefix: str, count: int) -> list[dict[str, Any]]:
    """The JSON summaries ``<prefix>-00000.json`` … the pipeline's workers wrote."""
    out = []
    for k in range(count):
        path = os.path.join(job.out_dir, f"{prefix}-{k:05d}.json")
        if not os.path.exists(path):
            raise CacheBuildError(f"{path}: missing after the pipeline finished; build again")
        with open(path, encoding="utf-8") as f:
            out.append(json.load(f))
    return out


def _index(job: _PartJob, identity: dict[str, Any], info: Any, runner: str, seconds: float,
           planned: dict[str, int]) -> CacheIndex:
    """index.json's contents from the parts' and the shards' summaries. ``build["read"]``:
    what was read from the source — by the plan (``planned``) and by each part — in examples
    (lines or records) and bytes."""
    import apache_beam as beam

    parts = _summaries(job, "part", job.num_parts)
    shards = _summaries(job, "shard", job.num_shards)
    sides = ("inputs", "targets")
    per_part = [p["read"] for p in parts]
    read = {k: planned[k] + sum(r[k] for r in per_part) for k in ("examples", "bytes")}
    return CacheIndex(
        version=layout.CACHE_VERSION, task=job.task, pair=info.pair, split=job.split,
        examples=sum(v["examples"] for v in shards), num_shards=job.num_shards,
        shard_examples=[v["examples"] for v in shards],
        shard_bytes=[v["bytes"] for v in shards],
        shard_sha256=[v["sha256"] for v in shards],
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
               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "read": {**read, "plan": dict(planned), "parts": per_part}},
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


def _build_failure(err: BaseException, task: str, tmp: str, log_path: str) -> BaseException:
    """What a failed build raises (its temporary directory already removed): a worker's own
    one-line error, a full disk (wherever it happened), else the error's last line and the
    workers' log; KeyboardInterrupt and the like unchanged."""
    line = _failure_line(err)
    if line:
        return CacheBuildError(line)
    if isinstance(err, CacheBuildError):
        return err
    if _is_no_space(err):
        return CacheBuildError(_no_space(task, tmp, "finishing"))
    if isinstance(err, Exception):
        last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
        return CacheBuildError(f"building the cache of {task!r} failed: {last[0]} "
                               f"(the Beam workers' log: {log_path})")
    return err


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
    os.makedirs(cache_dir, exist_ok=True)
    _remove_stale_builds(cache_dir, task_name)
    tmp = f"{final}.tmp-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    vocab = get_vocabulary(info.vocab_path)
    reader = split_parts(info)
    planned = ReadCount()
    blocks = tuple(reader.plan(split, min(parts, shards), planned))
    job = _PartJob(task=task_name, split=split, reader=reader, blocks=blocks,
                   spm_model=vocab.tokenizer.serialized_model_proto(),
                   language_id=identity["language_id"], dtype=layout.ids_dtype(vocab.vocab_size),
                   num_shards=shards, group_size=int(group_size), out_dir=tmp)
    say(f"cache: building {task_name} ({'forced' if force and not reason else reason}) into "
        f"{shards} shards with {job.num_parts} Beam worker(s)")
    start = time.perf_counter()
    log_path = f"{final}.build.log"
    try:
        os.makedirs(tmp)
        runner = _run_pipeline(job, beam_args, log_path)
        index = _index(job, identity, info, runner, time.perf_counter() - start,
                       dataclasses.asdict(planned))
        if index.examples == 0:
            raise CacheBuildError(f"task {task_name!r}: split {split!r} has no examples to cache")
        with open(os.path.join(tmp, layout.INDEX_FILE), "w", encoding="utf-8") as f:
            f.write(index.to_json())
        for name in os.listdir(tmp):
            if name.endswith(".json") and name.startswith(("part-", "shard-")):
                os.remove(os.path.join(tmp, name))
        with open(os.path.join(tmp, layout.COMPLETED_FILE), "w", encoding="utf-8") as f:
            f.write(index.build["created"] + "\n")
        _install(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _build_failure(err, task_name, tmp, log_path) from None
    seconds = index.build["seconds"]
    say(f"cache: {task_name}: {index.examples:,} examples, "
        f"{sum(index.tokens.values()):,} tokens in {seconds:.1f} s "
        f"({index.examples / max(seconds, 1e-9):,.0f} pairs/s) -> {final}")
    return index
