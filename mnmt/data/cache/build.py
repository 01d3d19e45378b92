"""Build a task's token cache (``build_cache``): find it up to date, or run the Apache Beam
pipeline of :mod:`mnmt.data.cache.beam_pipeline` (SeqIO's ``cache_tasks`` engine) and install
what it wrote.

The driver plans the parts (each reads only its block of the split), runs the pipeline into a
temporary directory, merges the parts' and shards' summaries into ``index.json`` (with what
each part read from the source in ``build["read"]``), writes ``COMPLETED`` and renames the
temporary directory into place, so a killed or failed build (a full disk included) leaves no
directory a reader would take; a failure raises one clear line
(:mod:`mnmt.data.cache.build_errors`).

By default the pipeline runs on Beam's portable local runner over all cores
(``--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=<cores>``);
any other Beam options (``--runner=DataflowRunner --project=… --region=… --temp_location=gs://…``,
or Flink/Spark job-server options) replace them unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mnmt.data.cache import layout
from mnmt.data.cache.beam_pipeline import LOCAL_RUNNERS, PartJob, run_pipeline
from mnmt.data.cache.build_errors import CacheBuildError, build_failure
from mnmt.data.cache.layout import CacheError, CacheIndex
from mnmt.data.sources.parts import ReadCount, split_parts

__all__ = ["build_cache", "CacheBuildError", "cache_status", "default_num_parts",
           "default_num_shards", "expected_identity", "read_complete_index",
           "DEFAULT_GROUP_SIZE", "SMALL_SPLIT", "LOCAL_RUNNERS"]

# ArrayRecord records per chunk: 32 keeps the reader's index at a few bytes per example (group
# size 1 costs ≈ 35 B/example in memory and is slower on random reads of small records here:
# benchmarks/RESULTS.md).
DEFAULT_GROUP_SIZE = 32
SMALL_SPLIT = 200_000


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
        return (f"layout version {index.version}, this code reads {layout.CACHE_VERSION}"
                + (" (version 1 tokenized word by word, which segments some words otherwise)"
                   if index.version == 1 else ""))
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


def _summaries(job: PartJob, prefix: str, count: int) -> list[dict[str, Any]]:
    """The JSON summaries ``<prefix>-00000.json`` … the pipeline's workers wrote."""
    out = []
    for k in range(count):
        path = os.path.join(job.out_dir, f"{prefix}-{k:05d}.json")
        if not os.path.exists(path):
            raise CacheBuildError(f"{path}: missing after the pipeline finished; build again")
        with open(path, encoding="utf-8") as f:
            out.append(json.load(f))
    return out


def _index(job: PartJob, identity: dict[str, Any], info: Any, runner: str, seconds: float,
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




def remove_unfinished_build(tmp: str, wait_s: float = 10.0) -> None:
    """Remove a failed build's temporary directory. When one Beam worker fails, the others may
    still be writing shards into it: a file created while ``rmtree`` walks the directory keeps
    the directory alive, so it is removed again until it is gone (at most ``wait_s`` seconds;
    a worker opening a file after that finds no directory and fails, creating nothing)."""
    deadline = time.monotonic() + wait_s
    while True:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.lexists(tmp) or time.monotonic() > deadline:
            return
        time.sleep(0.05)


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
    job = PartJob(task=task_name, split=split, reader=reader, blocks=blocks,
                   spm_model=vocab.tokenizer.serialized_model_proto(),
                   language_id=identity["language_id"], dtype=layout.ids_dtype(vocab.vocab_size),
                   num_shards=shards, group_size=int(group_size), out_dir=tmp)
    say(f"cache: building {task_name} ({'forced' if force and not reason else reason}) into "
        f"{shards} shards with {job.num_parts} Beam worker(s)")
    start = time.perf_counter()
    log_path = f"{final}.build.log"
    try:
        os.makedirs(tmp)
        runner = run_pipeline(job, beam_args, log_path)
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
        remove_unfinished_build(tmp)
        raise build_failure(err, task_name, tmp, log_path) from None
    seconds = index.build["seconds"]
    say(f"cache: {task_name}: {index.examples:,} examples, "
        f"{sum(index.tokens.values()):,} tokens in {seconds:.1f} s "
        f"({index.examples / max(seconds, 1e-9):,.0f} pairs/s) -> {final}")
    return index
