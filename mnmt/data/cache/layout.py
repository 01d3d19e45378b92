"""The on-disk layout of a token cache: shard names, the record encoding, the index file.

A task's cache is one directory ``<cache_dir>/<task_name>/`` (SeqIO's ``cache_tasks`` convention:
one directory per task, a marker file written last):

- ``train.array_record-00000-of-00016`` … — ArrayRecord shards; example ``i`` of the split (in
  the order its source yields them) is in shard ``i % num_shards``, in order;
- ``index.json`` — :class:`CacheIndex`: counts, token totals, length histograms, the digests of
  the vocabulary and of the source, and the ids the reader needs without loading the vocabulary;
- ``COMPLETED`` — written last; a directory without it (a killed or failed build) is never read.

A build writes into ``<task_name>.tmp-<host>-<pid>-<random>`` beside the final directory and
renames it into place only when complete.

A record is one training example as the pipeline uses it before EOS: the source with the
target-language token first (``[<2xx>, *source]``) and the target, as little-endian integers —
a 4-byte source length, then source and target ids in the cache's ``dtype`` (``uint16`` for
vocabularies up to 65,536 pieces, else ``uint32``).
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["CACHE_VERSION", "INDEX_FILE", "COMPLETED_FILE", "CacheError", "CacheIndex",
           "task_cache_dir", "shard_name", "encode_example", "decode_example",
           "decode_examples", "ids_dtype",
           "file_sha256", "source_fingerprint", "LENGTH_BINS", "length_histogram",
           "rebuild_hint"]

# 2: ids by mnmt.data.vocab.text_encoder (whole-text SentencePiece, as every other path);
# version 1 encoded spaced text word by word, which breaks some segmentation ties otherwise
CACHE_VERSION = 2
INDEX_FILE = "index.json"
COMPLETED_FILE = "COMPLETED"
# Length-histogram bin edges (tokens, both sides): [0,8), [8,16), [16,32), … [2048, inf)
LENGTH_BINS = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


class CacheError(ValueError):
    """A cache that cannot be used as it is (message: the file, what is wrong, what to do)."""


def rebuild_hint(task: str) -> str:
    """The command that rebuilds a task's cache (used in every error message)."""
    return (f"rebuild it: delete that task's cache directory ({task}) and run the study's data "
            "stage again (mnmt-study prepare or run), or build_cache(..., force=True)")


def task_cache_dir(cache_dir: str, task_name: str) -> str:
    """``<cache_dir>/<task_name>``: the directory of one task's cache."""
    return os.path.join(str(cache_dir), task_name)


def shard_name(split: str, shard: int, num_shards: int) -> str:
    """File name of one shard, e.g. ``train.array_record-00003-of-00016``."""
    return f"{split}.array_record-{shard:05d}-of-{num_shards:05d}"


def ids_dtype(vocab_size: int) -> str:
    """The narrowest unsigned dtype holding every id of a vocabulary."""
    return "uint16" if int(vocab_size) <= 2**16 else "uint32"


_TYPECODES = {"uint16": "H", "uint32": "I"}


def encode_example(inputs: Sequence[int], targets: Sequence[int], dtype: str) -> bytes:
    """One record: 4-byte source length, then source and target ids (see the module doc)."""
    ids = array.array(_TYPECODES[dtype], inputs)
    ids.extend(targets)
    if sys.byteorder != "little":
        ids.byteswap()
    return len(inputs).to_bytes(4, "little") + ids.tobytes()


def decode_example(record: bytes, dtype: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (inputs, targets) ids of a record written by :func:`encode_example`."""
    return decode_examples([record], dtype)[0]


def decode_examples(records: Sequence[bytes], dtype: str
                    ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (inputs, targets) ids of records written by :func:`encode_example`, in order.

    One numpy pass over the records' concatenation instead of one per record: the ids of all
    records become Python ints at once and each record's two sides are slices of them (a
    record's header is ``4 / itemsize`` whole ids, so every record starts on an id boundary).
    The sides are tuples, not lists: a tuple of ints is dropped from the garbage collector's
    tracking at its first collection, so the blocks a stream holds never grow the old
    generation and set off full collections (lists of the same ids are tracked for life; in
    a training process with a large heap those collections cost more than reading the
    records). A record shorter than its header, with a partial id, or declaring a source
    longer than its ids is a ValueError naming its position and size.
    """
    if not records:
        return []
    ids_type = np.dtype(dtype).newbyteorder("<")
    width = ids_type.itemsize
    sizes = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
    bad = np.flatnonzero((sizes < 4) | ((sizes - 4) % width != 0))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"record {k} of {sizes[k]} bytes: expected a 4-byte source length "
                         f"and whole {dtype} ids")
    data = b"".join(records)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    header = np.frombuffer(data, dtype=np.uint8)[starts[:, None] + np.arange(4)].astype(np.int64)
    n_source = header @ np.array([1, 1 << 8, 1 << 16, 1 << 24], dtype=np.int64)
    bad = np.flatnonzero(n_source > (sizes - 4) // width)
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"record {k} of {sizes[k]} bytes declares a {n_source[k]}-token source")
    ids = tuple(np.frombuffer(data, dtype=ids_type).tolist())
    first = (starts + 4) // width
    return [(ids[a:b], ids[b:c]) for a, b, c in zip(first.tolist(), (first + n_source).tolist(),
                                                      (ends // width).tolist(), strict=True)]


def length_histogram(lengths: np.ndarray) -> list[int]:
    """Counts of ``lengths`` in the bins of :data:`LENGTH_BINS` (the last bin is open)."""
    bins = np.searchsorted(np.asarray(LENGTH_BINS[1:]), lengths, side="right")
    return np.bincount(bins, minlength=len(LENGTH_BINS)).astype(int).tolist()


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
    """Hex SHA-256 of a file's bytes (local or any ``tf.io.gfile`` path)."""
    from fitting.data.io import is_remote

    digest = hashlib.sha256()
    if is_remote(path):
        import tensorflow as tf

        opener = tf.io.gfile.GFile(path, "rb")
    else:
        opener = open(path, "rb")  # noqa: SIM115  (closed by the with below)
    with opener as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _local_files(value: Any) -> list[str]:
    """Every existing local file named anywhere in a (nested) task definition."""
    if isinstance(value, str):
        return [value] if os.path.isfile(value) else []
    if isinstance(value, Mapping):
        return [f for v in value.values() for f in _local_files(v)]
    if isinstance(value, list | tuple):
        return [f for v in value for f in _local_files(v)]
    return []


def source_fingerprint(definition: Mapping[str, Any]) -> str:
    """A digest that changes when a task's source changes: the task definition (corpus,
    splits, reading options; not the vocabulary, which has its own digest) and the size and
    modification time of every local file it names (as ``make`` decides; the corpus is not
    read, so checking a 38M-pair cache is instant)."""
    ident = {k: v for k, v in definition.items() if k != "vocab"}
    files = []
    for path in sorted(set(_local_files(ident))):
        st = os.stat(path)
        files.append([path, st.st_size, st.st_mtime_ns])
    text = json.dumps({"definition": ident, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclasses.dataclass
class CacheIndex:
    """Contents of ``index.json``: what a cache holds and what it was built from.

    Attributes:
      version: layout and tokenization version (:data:`CACHE_VERSION`); another version is
        rebuilt.
      task: the task name; pair: its ``src-tgt`` pair; split: the cached split.
      examples: number of examples = ``sum(shard_examples)``.
      num_shards: number of ArrayRecord shards S; example i is in shard ``i % S``.
      shard_examples: examples per shard; shard_bytes: file size per shard (a truncated or
        replaced shard differs); shard_sha256: SHA-256 per shard (``mnmt-cache verify``).
      tokens: total ids per side, ``{"inputs": Σ len(inputs), "targets": Σ len(targets)}``
        (inputs include the ``<2xx>`` token; no EOS).
      max_length: the longest example per side, in ids.
      length_histogram: per side, counts in the bins :data:`LENGTH_BINS` of ids per example.
      dtype: ``uint16`` or ``uint32``, the stored id type.
      vocabulary: ``{"path", "sha256", "size"}`` of the SentencePiece model used.
      language_id: id of the target-language token ``<2xx>``; eos_id: EOS (appended when
        batches are built, not stored); separator_id: the decoder-only ``</src>`` id or None.
      source: ``{"definition": task definition, "fingerprint": source_fingerprint(...)}``.
      group_size: ArrayRecord records per chunk.
      build: how it was built (engine, runner, parts, seconds, created).
    """

    version: int
    task: str
    pair: str
    split: str
    examples: int
    num_shards: int
    shard_examples: list[int]
    shard_bytes: list[int]
    shard_sha256: list[str]
    tokens: dict[str, int]
    max_length: dict[str, int]
    length_histogram: dict[str, list[int]]
    dtype: str
    vocabulary: dict[str, Any]
    language_id: int
    eos_id: int
    separator_id: int | None
    source: dict[str, Any]
    group_size: int
    build: dict[str, Any]

    def contents_digest(self) -> str:
        """A digest of what a reader sees: shard count, examples and bytes of every shard
        (a rebuild with the same data gives the same digest; a resharded one does not)."""
        text = json.dumps([self.version, self.dtype, self.num_shards, self.shard_examples,
                           self.shard_sha256])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1, sort_keys=True) + "\n"

    @classmethod
    def read(cls, path: str) -> CacheIndex:
        """Parse an ``index.json``; a :class:`CacheError` naming the file when it is not one."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            fields = {f.name for f in dataclasses.fields(cls)}
            missing = sorted(fields - set(data))
            if missing:
                raise ValueError(f"missing fields {missing}")
            return cls(**{k: data[k] for k in fields})
        except (OSError, ValueError, TypeError) as err:
            raise CacheError(f"{path}: not a readable cache index ({err})") from err
