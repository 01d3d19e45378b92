"""Read a task's token cache by index: Grain's ``ArrayRecordDataSource`` over this host's shards.

A host ``h`` of ``H`` opens only the shards ``s`` with ``s % H == h`` (the cache's shard count
must be a multiple of ``H``): since example ``i`` of the split is in shard ``i % S``, the host
holds exactly the examples ``i % H == h`` — the assignment the in-memory path uses — and the
hosts together hold the split once. Epoch ``e`` visits the host's examples in the order of
Grain's ``index_shuffle`` (a seeded bijection computed per index, so no permutation array
exists), seeded per (task, seed, host, epoch): the example at stream position ``c`` is a pure
function of ``c``, which is what exact resume needs.

Nothing of the corpus is held in memory beyond ArrayRecord's chunk index and the records of
the batch being read; shards are opened on first read.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np

from mnmt.data.cache import layout
from mnmt.data.cache.build import cache_status, expected_identity, read_complete_index
from mnmt.data.cache.layout import CacheError, CacheIndex

__all__ = ["CachedSplit", "open_task_cache", "find_task_cache", "READ_AHEAD"]

log = logging.getLogger(__name__)
# Stream positions read per batched ArrayRecord read (≈ 0.5 MB of ids at 25 tokens a side).
READ_AHEAD = 4096


class _GroupSizeNote(logging.Filter):
    """Drop ArrayRecord's "Grain requires group size 1" error: our shards use larger groups on
    purpose (smaller index, faster random reads of small records; see build.DEFAULT_GROUP_SIZE)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "requires group size 1" not in record.getMessage()


logging.getLogger("absl").addFilter(_GroupSizeNote())


class CachedSplit:
    """One host's examples of a cached split, by position in an endless, epoch-shuffled stream.

    ``examples(start, n)`` returns the (``[<2xx>, *source]``, target) id lists at stream
    positions ``start … start+n-1``; position ``c`` is example ``perm_e(c mod N)`` of epoch
    ``e = c // N``, N the host's example count.
    """

    def __init__(self, directory: str, index: CacheIndex, host: tuple[int, int], seed_key: tuple):
        from grain.sources import ArrayRecordDataSource

        from mnmt.data.synthetic.grammar import stable_seed

        h, num_hosts = host
        if index.num_shards % num_hosts:
            raise CacheError(
                f"{directory}: {index.num_shards} shards cannot be split evenly over {num_hosts} "
                f"hosts; rebuild it with a multiple of {num_hosts} shards (StudySpec.cache_shards="
                f"{num_hosts * max(1, -(-index.num_shards // num_hosts))}, then mnmt-study prepare)")
        self.directory = directory
        self.index = index
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
        counts = [index.shard_examples[s] for s in self.shards]
        self._starts = np.cumsum([0, *counts])
        self.size = int(self._starts[-1])
        if self.size == 0:
            raise CacheError(f"{directory}: no examples for host {h} of {num_hosts}")
        # "path[0:n]": the counts come from the index, so no file is opened before its first read
        self.source = ArrayRecordDataSource(
            [f"{p}[0:{n}]" for p, n in zip(self.paths, counts, strict=True) if n])
        self._stable_seed = stable_seed
        self._seed_key = seed_key
        self._epoch_seed: tuple[int, int] | None = None
        self._ahead: tuple[int, list] = (0, [])

    def _seed(self, epoch: int) -> int:
        if self._epoch_seed is None or self._epoch_seed[0] != epoch:
            self._epoch_seed = (epoch, self._stable_seed("epoch", *self._seed_key, epoch) % 2**32)
        return self._epoch_seed[1]

    def positions(self, start: int, n: int) -> list[int]:
        """Host-local example indices at stream positions start … start+n-1."""
        from grain.experimental import index_shuffle

        out: list[int] = []
        last = self.size - 1
        while n > 0:  # one run of positions per epoch: one seed
            epoch, pos = divmod(start, self.size)
            m = min(n, self.size - pos)
            seed = self._seed(epoch)
            out.extend(index_shuffle(p, max_index=last, seed=seed, rounds=4) if last else 0
                       for p in range(pos, pos + m))
            start += m
            n -= m
        return out

    def examples(self, start: int, n: int) -> list[tuple[list[int], list[int]]]:
        """The examples at stream positions start … start+n-1, read ahead in blocks of
        :data:`READ_AHEAD` positions (one batched ArrayRecord read per block; the block is a
        pure function of its first position, so reading ahead changes nothing a resume sees)."""
        out: list[tuple[list[int], list[int]]] = []
        while n > 0:
            lo, block = self._ahead
            if not lo <= start < lo + len(block):
                self._ahead = (start, self._read(start, max(n, READ_AHEAD)))
                lo, block = self._ahead
            take = block[start - lo:start - lo + n]
            out.extend(take)
            start += len(take)
            n -= len(take)
        return out

    def _read(self, start: int, n: int) -> list[tuple[list[int], list[int]]]:
        keys = self.positions(start, n)
        try:
            records = self.source.__getitems__(keys)
            return [layout.decode_example(r, self.index.dtype) for r in records]
        except Exception as err:  # corrupt chunk or record: name the shard
            raise CacheError(f"{self._failing_shard(keys)}: cannot read records ({err}); the "
                             f"shard is corrupt: {layout.rebuild_hint(self.index.task)}") from err

    def _failing_shard(self, keys: Sequence[int]) -> str:
        """The first shard whose records among ``keys`` cannot be read (its path)."""
        from array_record.python.array_record_module import ArrayRecordReader

        for key in keys:
            k = int(np.searchsorted(self._starts, key, side="right")) - 1
            try:
                reader = ArrayRecordReader(self.paths[k], "readahead_buffer_size:0")
                record = reader.read(int(key - self._starts[k]), int(key - self._starts[k]) + 1)
                layout.decode_example(record[0], self.index.dtype)
            except Exception:
                return self.paths[k]
        return self.directory


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
