"""The Apache Beam pipeline that writes a token cache's shards (SeqIO's ``cache_tasks`` engine),
run by :func:`mnmt.data.cache.build.build_cache` into a temporary directory.

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
Each part and each shard also writes a JSON summary (``part-00000.json``, ``shard-00000.json``)
from which the driver writes ``index.json``.

By default the pipeline runs on Beam's portable local runner over all cores
(``--runner=FnApiRunner --direct_running_mode=multi_processing --direct_num_workers=<cores>``);
any other Beam options (``--runner=DataflowRunner --project=… --region=… --temp_location=gs://…``,
or Flink/Spark job-server options) replace them unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from mnmt.data.cache import layout
from mnmt.data.cache.build_errors import ERROR_MARK, CacheBuildError, is_no_space, no_space_message

__all__ = ["PartJob", "run_pipeline", "LOCAL_RUNNERS"]

_ENCODE_BATCH = 2048
LOCAL_RUNNERS = ("FnApiRunner", "DirectRunner", "PrismRunner")


@dataclasses.dataclass(frozen=True)
class PartJob:
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


def _write_error(job: PartJob, err: BaseException, what: str) -> CacheBuildError:
    """The one-line error of a failed write in a worker (marked so the driver finds it in the
    runner's wrapped error): no space left, or the error's first line."""
    if is_no_space(err):
        return CacheBuildError(ERROR_MARK + no_space_message(job.task, job.out_dir, what))
    return CacheBuildError(f"{ERROR_MARK}{job.out_dir}: {str(err).splitlines()[0]} while "
                           f"{what} of task {job.task!r}; build again (nothing was replaced)")


def _write_part(job: PartJob, part: int) -> dict[str, Any]:
    """Read, tokenize and write one part's block of the split: its examples ``j`` (in block
    order) into piece ``j % S``; returns its summary (also written as JSON)."""
    import sentencepiece as spm
    from array_record.python.array_record_module import ArrayRecordWriter

    from mnmt.data.sources.parts import ReadCount
    from mnmt.data.vocab import example_encoder

    # the ids every other path gives: the one rule of mnmt.data.vocab (whole-text SentencePiece)
    encode = example_encoder(spm.SentencePieceProcessor(model_proto=job.spm_model),
                             job.language_id)
    shards = job.num_shards
    counts = [0] * shards
    lengths: dict[str, list[np.ndarray]] = {"inputs": [], "targets": []}
    batch: list[tuple[str, str]] = []
    read = ReadCount()
    seen = 0

    def flush(writers) -> None:
        nonlocal seen
        examples = [encode(s, t) for s, t in batch]
        for src, tgt in examples:
            residue = seen % shards
            writers[residue].write(layout.encode_example(src, tgt, job.dtype))
            counts[residue] += 1
            seen += 1
        lengths["inputs"].append(np.fromiter((len(s) for s, _ in examples), np.int64))
        lengths["targets"].append(np.fromiter((len(t) for _, t in examples), np.int64))
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


def _merge_shard(job: PartJob, shard: int, examples: Sequence[tuple[int, int]]) -> int:
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


def run_pipeline(job: PartJob, beam_args: Sequence[str], log_path: str) -> str:
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

