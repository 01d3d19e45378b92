"""Per-task token streams of the training iterator (:class:`mnmt.data.pipeline.TrainInputs`).

A :class:`TaskStream` yields one task's tokenized training examples (``<2xx>`` + source,
target; no EOS yet) from a cursor on, endlessly: an unlimited synthetic stream read in order
(in this process or in a background one, :mod:`mnmt.data.stream_workers`), or a finite training
set read in its seeded per-epoch order (:mod:`mnmt.data.epoch_order`) from its token cache
(:mod:`mnmt.data.cache`) or, without one, from memory (:func:`in_memory_train_set`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from mnmt.data.epoch_order import BlockReader, EpochOrder

__all__ = ["TaskStream", "in_memory_train_set", "IN_MEMORY_WARNING"]

# Finite training sets larger than this, read without a token cache, log a warning.
IN_MEMORY_WARNING = 1_000_000
# The logger these streams have always used (they were part of mnmt.data.pipeline).
log = logging.getLogger("mnmt.data.pipeline")


class TaskStream:
    """Tokenized training examples (``<2xx>`` + source, target; no EOS yet) of one task from
    position ``cursor`` on (endless).

    Unlimited synthetic streams are read sequentially (re-seeded per data shard). A finite
    training set is read by index from its token cache when one of ``cache_dirs`` has it
    (:mod:`mnmt.data.cache`: only this shard's files), otherwise held in memory; either way
    this shard's examples are visited in the same seeded order
    (:class:`mnmt.data.epoch_order.EpochOrder`, keyed by task, seed, shard and epoch), so the
    cache changes no batch. What moves while reading (cursor, read-ahead) is this stream's own;
    the cache and the in-memory set behind it are shared read-only.
    """

    def __init__(self, name: str, seed: int, shard: tuple[int, int], cursor: int,
                 use_process: bool = False, cache_dirs: Sequence[str] = ()) -> None:
        from mnmt.data.tasks import get_task_info
        from mnmt.data.vocab import example_encoder, get_vocabulary, language_token_id

        self.name = name
        self.info = get_task_info(name)
        vocab = get_vocabulary(self.info.vocab_path)
        self.sp = vocab.tokenizer
        self.lang_id = language_token_id(vocab, self.info.target_language)
        self.seed = seed
        self.shard = shard
        self.cursor = cursor
        self._finite: list[tuple[list[int], list[int]]] | None = None
        self._reader: BlockReader | None = None
        self._gen: Iterator[tuple[str, str]] | None = None
        self._encode = example_encoder(vocab, self.lang_id)
        self.use_process = use_process
        self._proc = None
        self.cached = None
        if self.info.train_size is not None or self.info.text_stream is None or (
            self.info.definition.get("kind") != "synthetic"
        ):
            from mnmt.data.cache import open_task_cache

            self.cached = open_task_cache(name, cache_dirs, shard, seed)
            if self.cached is not None:
                self._reader = self.cached.reader()
            else:
                self._finite = in_memory_train_set(self.info, shard)
                if not self._finite:
                    raise ValueError(f"task {name!r}: training split of shard {shard} is empty")
                self._order = EpochOrder(len(self._finite), (name, seed, *shard))
                self._reader = BlockReader(self._in_memory_examples)

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``([<2xx>, *source], target)`` ids of (source, target) texts, by the one rule of
        :func:`mnmt.data.vocab.example_encoder` (one call per string: batched encode spawns
        threads per call, slower for short sentences on a loaded machine)."""
        encode = self._encode
        return [encode(s, t) for s, t in pairs]

    def _in_memory_examples(self, start: int, n: int) -> list[tuple[list[int], list[int]]]:
        """The in-memory examples at stream positions start … start+n-1 (see the class doc)."""
        finite = self._finite
        return [finite[i] for i in self._order.indices(start, n).tolist()]

    def _stream_seed(self) -> tuple:
        return ("train-stream", self.seed, *self.shard)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None

    def take(self, n: int) -> list[tuple[Sequence[int], Sequence[int]]]:
        """The next ``n`` examples: lists in memory, tuples from a token cache (same ids)."""
        if n == 0:
            return []
        if self._reader is not None:  # finite: cached or in memory, one order
            out = self._reader.take(self.cursor, n)
            self.cursor += n
            return out
        if self.use_process:
            if self._proc is None:
                from mnmt.data.stream_workers import ProcessStream

                fam = self.info.extra["family"]
                self._proc = ProcessStream(
                    fam.preset, fam.seed, self.info.pair, self.cursor, self._stream_seed(),
                    self.sp.serialized_model_proto(), self.lang_id,
                )
            out = self._proc.take(n)
            self.cursor += n
            return out
        if self._gen is None:
            self._gen = self.info.text_stream("train", self.cursor, self._stream_seed())
        texts = [next(self._gen) for _ in range(n)]
        self.cursor += n
        return self.encode(texts)


_FINITE_CACHE: dict[tuple, list] = {}


def in_memory_train_set(info, shard: tuple[int, int]) -> list[tuple[list[int], list[int]]]:
    """Today's path for a finite task without a token cache: the examples ``i % count ==
    index`` of its training split, tokenized (``[<2xx>, *source]``, target), held in memory
    (memoised per task definition, vocabulary and shard)."""
    from mnmt.data.vocab import example_encoder, get_vocabulary, language_token_id

    vocab = get_vocabulary(info.vocab_path)
    key = (info.name, repr(sorted(info.definition.items(), key=str)), id(vocab), shard)
    if key not in _FINITE_CACHE:
        encode = example_encoder(vocab, language_token_id(vocab, info.target_language))
        index, count = shard
        texts = [st for i, st in enumerate(info.text_stream("train", 0, None)) if i % count == index]
        _FINITE_CACHE[key] = [encode(s, t) for s, t in texts]
        if len(texts) > IN_MEMORY_WARNING:
            log.warning("task %s: %d training examples of shard %s held in memory; build its "
                        "token cache (mnmt.data.cache.build_cache; mnmt-study prepare does it for "
                        "a study) and pass cache_dirs to read it by index",
                        info.name, len(texts), shard)
    return _FINITE_CACHE[key]
