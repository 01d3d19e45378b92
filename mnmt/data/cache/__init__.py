"""Token caches: a task's training split tokenized once into sharded ArrayRecord files.

- ``layout``: the directory, shard names, record encoding and ``index.json`` (:class:`CacheIndex`);
- ``build``: the Apache Beam pipeline that writes a cache (``build_cache``; skipped when up to
  date, rebuilt when the vocabulary or the source changed, installed atomically);
- ``reader``: this host's shards read by index with ArrayRecord's reader (dense blocks by
  whole chunks), in the in-memory path's seeded per-epoch order (``open_task_cache``: one immutable
  ``CachedSplit`` per task, shared; each stream reads ahead through its own ``reader()``);
- ``cli``: ``mnmt-cache info | verify`` (a study's data stage, ``mnmt-study prepare``, builds).
"""

from mnmt.data.cache.build import CacheBuildError, build_cache, default_num_shards
from mnmt.data.cache.layout import CacheError, CacheIndex, task_cache_dir
from mnmt.data.cache.reader import CachedSplit, find_task_cache, open_task_cache

__all__ = ["CacheBuildError", "CacheError", "CacheIndex", "CachedSplit", "build_cache",
           "default_num_shards", "find_task_cache", "open_task_cache", "task_cache_dir"]
