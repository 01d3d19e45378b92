"""Read a task's token cache by index: ArrayRecord readers over this host's shards.

A host ``h`` of ``H`` opens only the shards ``s`` with ``s % H == h`` (the cache's shard count
``S`` must be a multiple of ``H``): since example ``i`` of the split is in shard ``i % S``, the
host holds exactly the examples ``i % H == h`` — the examples the in-memory path holds — and
the hosts together hold the split once. Host-local example ``j`` is global example
``i = h + j·H``, as in memory: record ``i // S`` of shard ``i % S``. Epoch ``e`` visits them in
the order of :class:`mnmt.data.epoch_order.EpochOrder` with the in-memory path's key, so a
seed gives the same batches with and without the cache, and the example at a stream position
is a pure function of the position.

A :class:`CachedSplit` is immutable (the shard readers, the index, the order) and is shared by
every stream that reads the task; what changes while reading — the cursor and the read-ahead
block — belongs to each stream (:class:`mnmt.data.epoch_order.BlockReader`), so streams read
it from any number of threads. Nothing of the corpus is held in memory beyond ArrayRecord's
chunk index and the blocks the streams are reading; shards are opened on first read.

A block of positions is read shard by shard with ArrayRecord's own reader (one per shard,
shared, opened for random access without a thread pool). A record is read by decompressing
its chunk (``group_size`` records), so a shard whose wanted records are dense — at least
:data:`DENSE_FRACTION` of the records of the chunks they touch, as in a 4,096-position block of
a split of a few thousand examples — has those chunks read whole, runs of consecutive chunks as
one range read, each chunk decompressed once; a sparser shard has its records read by index
(a block of a split of 20,000 examples, ≈ 6 wanted records in each 32-record chunk touched,
read by index took ≈ 15 % less CPU than by whole chunks: benchmarks/RESULTS.md).
Either way the block is the same records in the same order, decoded in one numpy pass
(:func:`mnmt.data.cache.layout.decode_examples`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

import numpy as np

from mnmt.data.cache import layout
from mnmt.data.cache.build import cache_status, expected_identity, read_complete_index
from mnmt.data.cache.layout import CacheError, CacheIndex
from mnmt.data.epoch_order import ORDER_BLOCK, BlockReader, EpochOrder

__all__ = ["CachedSplit", "open_task_cache", "find_task_cache", "READ_AHEAD"]

log = logging.getLogger(__name__)
# Stream positions a stream reads per batched ArrayRecord read (≈ 0.5 MB of ids at 25 tokens
# a side).
READ_AHEAD = ORDER_BLOCK
# A shard's chunks are read whole (range reads) when at least this fraction of their records
# is wanted; below it, by index (see the module docstring).
DENSE_FRACTION = 0.25
_READER_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


class CachedSplit:
    """One host's examples of a cached split, by position in an endless, epoch-shuffled stream.

    ``examples(start, n)`` returns the (``[<2xx>, *source]``, target) ids (tuples, see
    :func:`~mnmt.data.cache.layout.decode_examples`) at stream positions ``start … start+n-1``; position ``c`` is host-local example ``π_e(c mod N)`` of
    epoch ``e = c // N`` (:class:`~mnmt.data.epoch_order.EpochOrder`), N the host's example
    count. Immutable: share it between streams and threads; give each stream its own
    :meth:`reader`.
    """

    def __init__(self, directory: str, index: CacheIndex, host: tuple[int, int], seed_key: tuple):
        h, num_hosts = host
        if index.num_shards % num_hosts:
            raise CacheError(
                f"{directory}: {index.num_shards} shards cannot be split evenly over {num_hosts} "
                f"hosts; rebuild it with a multiple of {num_hosts} shards (StudySpec.cache_shards="
                f"{num_hosts * max(1, -(-index.num_shards // num_hosts))}, then mnmt-study prepare)")
        self.directory = directory
        self.index = index
        self.host = (int(h), int(num_hosts))
        self.shards = list(range(h, index.num_shards, num_hosts))
        self.paths = [os.path.join(directory, layout.shard_name(index.split, s, index.num_shards))
                      for s in self.shards]
        for shard, path in zip(self.shards, self.paths, strict=True):
            if not os.path.exists(path):
                raise CacheError(f"{path}: shard missing from the cache; "
                                 f"{layout.rebuild_hint(index.task)}")
            size, expect = os.path.getsize(path), index.shard_bytes[shard]
            if size != expect:
                raise CacheError(f"{path}: {size} bytes, index.json records {expect} (truncated or "
                                 f"replaced); {layout.rebuild_hint(index.task)}")
        self.counts = [index.shard_examples[s] for s in self.shards]
        self._starts = np.cumsum([0, *self.counts])
        self.size = int(self._starts[-1])
        if self.size == 0:
            raise CacheError(f"{directory}: no examples for host {h} of {num_hosts}")
        # one ArrayRecord reader per shard, opened on its first read (the counts come from the
        # index); readers are thread-safe and shared by every stream
        self._readers: list = [None] * len(self.paths)
        self._open_lock = threading.Lock()
        self.order = EpochOrder(self.size, seed_key)

    def locate(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, record) of host-local examples ``local``: the shard as an index into
        :attr:`paths`, the record's position in it (numbered as in memory: ``j`` is global
        example ``i = h + j·H``, record ``i // S`` of shard ``i % S``)."""
        h, num_hosts = self.host
        i = h + np.asarray(local, dtype=np.int64) * num_hosts
        return (i % self.index.num_shards - h) // num_hosts, i // self.index.num_shards

    def keys(self, local: np.ndarray) -> np.ndarray:
        """Keys of host-local examples ``local`` over this host's shards in order (shard
        ``k``'s records are keys ``Σ_{k' < k} count_k' + record``)."""
        shard, record = self.locate(local)
        return self._starts[shard] + record

    def positions(self, start: int, n: int) -> list[int]:
        """Data-source keys at stream positions start … start+n-1."""
        return self.keys(self.order.indices(start, n)).tolist()

    def examples(self, start: int, n: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The examples at stream positions start … start+n-1 (read shard by shard as the
        module docstring says; no state: read in blocks through a stream's own
        :meth:`reader`)."""
        shard, record = self.locate(self.order.indices(start, n))
        by_shard = np.argsort(shard, kind="stable")
        bounds = np.searchsorted(shard[by_shard], np.arange(len(self.paths) + 1))
        out: list = [None] * n
        for k in np.flatnonzero(np.diff(bounds)).tolist():
            picks = by_shard[bounds[k]:bounds[k + 1]]
            for j, example in zip(picks.tolist(), self._read_shard(k, record[picks]), strict=True):
                out[j] = example
        return out

    def _read_shard(self, k: int, records: np.ndarray
                    ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """The examples at record positions ``records`` of shard ``k``, in that order."""
        group = self.index.group_size
        chunks = np.unique(records // group)
        try:
            reader = self._reader(k)
            if len(records) < DENSE_FRACTION * group * len(chunks):
                held = reader.read(records.tolist())
            else:  # whole chunks, each run of consecutive chunks as one range read
                run_of = np.flatnonzero(np.diff(chunks, prepend=-2) != 1)
                lo = chunks[run_of] * group
                hi = np.minimum((np.append(chunks[run_of[1:] - 1], chunks[-1]) + 1) * group,
                                self.counts[k])
                held = [r for a, b in zip(lo.tolist(), hi.tolist(), strict=True)
                        for r in reader.read(a, b)]
                run = np.searchsorted(lo, records, side="right") - 1
                offset = np.cumsum(hi - lo) - (hi - lo)
                held = [held[i] for i in (offset[run] + records - lo[run]).tolist()]
            return layout.decode_examples(held, self.index.dtype)
        except Exception as err:  # corrupt chunk or record: name the shard
            raise CacheError(f"{self.paths[k]}: cannot read records ({err}); the shard is "
                             f"corrupt: {layout.rebuild_hint(self.index.task)}") from err

    def _reader(self, k: int):
        """Shard ``k``'s ArrayRecord reader, opened on first use (thread-safe)."""
        if self._readers[k] is None:
            from array_record.python.array_record_module import ArrayRecordReader

            with self._open_lock:
                if self._readers[k] is None:
                    self._readers[k] = ArrayRecordReader(self.paths[k], _READER_OPTIONS)
        return self._readers[k]

    def reader(self) -> BlockReader:
        """A new stream's reader: ``reader.take(start, n)`` = ``examples(start, n)``, read
        ahead in blocks of :data:`READ_AHEAD` positions held by that reader alone."""
        return BlockReader(self.examples, READ_AHEAD)


_OPEN: dict[tuple, CachedSplit] = {}


def find_task_cache(task_name: str, cache_dirs: Sequence[str]) -> str | None:
    """The first ``<dir>/<task_name>`` directory among ``cache_dirs`` (complete or not)."""
    for cache_dir in cache_dirs:
        path = layout.task_cache_dir(cache_dir, task_name)
        if os.path.isdir(path):
            return path
    return None


def open_task_cache(task_name: str, cache_dirs: Sequence[str], host: tuple[int, int],
                    seed: int, split: str = "train") -> CachedSplit | None:
    """This host's :class:`CachedSplit` of a task from the first of ``cache_dirs`` that has it,
    or None when none has. A cache that exists but cannot be used — incomplete, built with
    another vocabulary or from another source, a truncated shard — is a :class:`CacheError`
    naming the file: never silently different data."""
    from mnmt.data.tasks import get_task_info

    path = find_task_cache(task_name, cache_dirs)
    if path is None:
        return None
    info = get_task_info(task_name)
    identity = expected_identity(info)
    key = (path, task_name, split, tuple(host), seed, identity["vocabulary"]["sha256"],
           identity["fingerprint"], _mtime(os.path.join(path, layout.COMPLETED_FILE)))
    if key in _OPEN:
        return _OPEN[key]
    index = read_complete_index(path)
    if index is None:
        raise CacheError(f"{path}: no {layout.COMPLETED_FILE} marker (an incomplete build); "
                         f"{layout.rebuild_hint(task_name)}")
    reason = cache_status(index, identity)
    if reason:
        raise CacheError(f"{os.path.join(path, layout.INDEX_FILE)}: {reason}; "
                         f"{layout.rebuild_hint(task_name)}")
    if index.split != split:
        raise CacheError(f"{path}: caches split {index.split!r}, training reads {split!r}")
    _OPEN[key] = CachedSplit(path, index, host, (task_name, seed, *host))
    return _OPEN[key]


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1
