"""The vocabulary's training text straight from registered tasks.

:func:`sample_task_texts` draws a seeded, pair-balanced sample of (source, target) pairs from the
training split of tasks registered through :mod:`mnmt.data.tasks` (synthetic, bitext, TFDS,
gettext — anything with a :attr:`~mnmt.data.tasks.TaskInfo.text_stream`). Each task's split is
streamed once with constant memory: a bottom-k sample by random keys (Algorithm L's geometric
skips, so that a long stream costs one random draw per *kept* example, not per example read),
bounded by a number of examples and a number of characters. Its random stream is seeded by
``stable_seed(seed, task name)``, so a task's sample does not depend on which other tasks are
sampled or in what order. Every task then contributes the same number of examples (the fewest any
task kept), so a 38M-pair corpus does not swamp a 5K-pair one. Unlimited synthetic streams give
their first examples instead.

``mnmt-vocab`` (:mod:`mnmt.study.vocab_cli`) trains the shared SentencePiece model on such a
sample. Registering a task checks its target-language token against a vocabulary, which does not
exist yet when the vocabulary is what is being trained: :func:`placeholder_vocabulary` makes a
throw-away one that holds only the language tokens and is never used to tokenize.
"""

from __future__ import annotations

import difflib
import heapq
import logging
import math
import random
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

__all__ = ["sample_task_texts", "reservoir_sample", "first_examples", "placeholder_vocabulary"]

log = logging.getLogger(__name__)

PROGRESS_SECONDS = 5.0  # a progress line at most this often while a long split is streamed
_SKIP_CHUNK = 1 << 16  # examples skipped between two looks at the clock


def _chars(item: Any) -> int:
    return len(item) if isinstance(item, str) else sum(len(part) for part in item)


class _Progress:
    def __init__(self, label: str, every: float) -> None:
        self.label, self.every = label, every
        self.start = self.last = time.monotonic()

    def maybe(self, read: int, kept: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            rate = read / max(now - self.start, 1e-9)
            log.info("vocabulary sample: %s: %s examples read (%s/s), %s kept", self.label,
                     f"{read:,}", f"{rate:,.0f}", f"{kept:,}")


def reservoir_sample(
    items: Iterable[Any],
    n: int | None = None,
    *,
    max_chars: int | None = None,
    rng: random.Random,
    label: str = "stream",
    progress_every: float = PROGRESS_SECONDS,
) -> tuple[list[Any], int]:
    """A uniform sample of ``items`` without replacement, in one pass and bounded memory.

    Every item gets a uniform random key; the sample is the longest run of items in key order
    with at most ``n`` items and at most ``max_chars`` characters (strings, or tuples of strings).
    Any prefix of it is itself a uniform sample. Items after the sample is full are skipped in
    geometric jumps (as in Li's Algorithm L): one random draw per kept item, none per skipped one.
    Returns (the sample in key order, the number of items read).
    """
    if n is None and max_chars is None:
        raise ValueError("reservoir_sample: expected a limit (n and/or max_chars)")
    for what, v in (("n", n), ("max_chars", max_chars)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise ValueError(f"reservoir_sample: {what} must be a positive int, got {v!r}")
    heap: list[tuple[float, int, Any, int]] = []  # (-key, arrival, item, chars): largest key first
    tau = 1.0  # keys at or above tau can no longer enter the sample
    total = read = 0
    it: Iterator[Any] = iter(items)
    progress = _Progress(label, progress_every)
    while True:
        if tau < 1.0:
            # the number of items before the next one whose key falls below tau ~ Geometric(tau)
            denom = math.log1p(-tau)
            skip = int(math.log(1.0 - rng.random()) / denom) if denom < 0 else sys.maxsize
            while skip > 0:
                chunk = min(skip, _SKIP_CHUNK)
                last = deque(enumerate(islice(it, chunk), 1), maxlen=1)
                got = last[0][0] if last else 0
                read += got
                skip -= chunk
                progress.maybe(read, len(heap))
                if got < chunk:
                    return [entry[2] for entry in sorted(heap, reverse=True)], read
            key_scale = tau
        else:
            key_scale = 1.0
        item = next(it, _END)
        if item is _END:
            break
        read += 1
        key = rng.random() * key_scale
        size = _chars(item)
        heapq.heappush(heap, (-key, read, item, size))
        total += size
        while heap and ((n is not None and len(heap) > n)
                        or (max_chars is not None and total > max_chars)):
            neg_key, _, _, dropped = heapq.heappop(heap)
            total -= dropped
            tau = -neg_key  # the smallest key left out: nothing at or above it can come in
        if tau >= 1.0 and not read & 0xFFF:
            progress.maybe(read, len(heap))
    return [entry[2] for entry in sorted(heap, reverse=True)], read


_END = object()


def first_examples(items: Iterable[Any], n: int | None = None, *,
                   max_chars: int | None = None) -> list[Any]:
    """The first items of a (possibly endless) stream: at most ``n`` and ``max_chars`` characters."""
    if n is None and max_chars is None:
        raise ValueError("an unlimited stream needs a limit: n_per_task and/or max_chars")
    out: list[Any] = []
    total = 0
    for item in items if n is None else islice(items, n):
        size = _chars(item)
        if max_chars is not None and total + size > max_chars:
            break
        out.append(item)
        total += size
    return out


def _task_info(name: str):
    from mnmt.data import tasks

    infos = tasks.task_infos()
    if name in infos:
        return infos[name]
    close = difflib.get_close_matches(name, list(infos), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = sorted(infos)
    shown = ", ".join(known[:8]) + (f", … ({len(known)} in all)" if len(known) > 8 else "")
    raise ValueError(f"unknown task {name!r}{hint}; expected a task registered through "
                     f"mnmt.data.tasks ({shown or 'none registered'})")


def sample_task_texts(
    task_names: Iterable[str],
    n_per_task: int | None = 20_000,
    *,
    seed: int = 0,
    max_chars: int | None = None,
    split: str = "train",
    stats: dict[str, dict[str, int]] | None = None,
) -> dict[str, list[tuple[str, str]]]:
    """A seeded, pair-balanced sample of the ``split`` of registered tasks → {task: [(src, tgt)]}.

    Every task gives the same number of examples: ``n_per_task``, or fewer if a task has fewer
    or the size limit ``max_chars`` (characters of both sides over all tasks, an equal share per
    task) allows fewer. Each split is read once with memory bounded by those limits; an unlimited
    synthetic stream gives its first examples. ``stats``, if given, receives per task the
    examples read and kept and the characters kept.
    """
    from mnmt.data.synthetic.grammar import stable_seed

    names = sorted(set(task_names))
    if not names:
        raise ValueError("sample_task_texts: expected at least one task name")
    if n_per_task is None and max_chars is None:
        raise ValueError("sample_task_texts: expected a limit: n_per_task and/or max_chars")
    for what, v in (("n_per_task", n_per_task), ("max_chars", max_chars)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise ValueError(f"sample_task_texts: {what} must be a positive int, got {v!r}")
    infos = {name: _task_info(name) for name in names}
    for name, info in infos.items():
        if info.text_stream is None:
            raise ValueError(f"task {name!r} has no text stream (a tf.data-only task); expected "
                             "a task registered through mnmt.data.tasks' text or synthetic paths")
        if split not in info.splits:
            raise ValueError(f"task {name!r} has no split {split!r}; expected one of "
                             f"{list(info.splits)}")
    budget = None if max_chars is None else max(1, max_chars // len(names))
    kept: dict[str, list[tuple[str, str]]] = {}
    read: dict[str, int] = {}
    for name, info in infos.items():
        t0 = time.monotonic()
        stream = info.text_stream(split, 0, None)
        unlimited = (info.split_sizes.get(split) is None
                     and info.definition.get("kind") == "synthetic")
        if unlimited:
            sample = first_examples(stream, n_per_task, max_chars=budget)
            read[name] = len(sample)
        else:
            rng = random.Random(stable_seed("vocabulary sample", seed, name))
            sample, read[name] = reservoir_sample(stream, n_per_task, max_chars=budget, rng=rng,
                                                  label=name, progress_every=PROGRESS_SECONDS)
        if read[name] == 0 and not unlimited:
            raise ValueError(f"task {name!r}: split {split!r} is empty; expected at least one "
                             "(source, target) example")
        kept[name] = [(str(s), str(t)) for s, t in sample]
        log.info("vocabulary sample: %s: %s examples read%s in %.1f s, %s kept", name,
                 f"{read[name]:,}", " (first examples of an unlimited stream)" if unlimited
                 else "", time.monotonic() - t0, f"{len(sample):,}")
    m = min(len(v) for v in kept.values())
    if m == 0:
        small = [k for k, v in kept.items() if not v]
        raise ValueError(f"max_chars {max_chars:,} leaves no example of {small} (a share of "
                         f"{budget:,} characters per task); expected a larger max_chars")
    out = {name: kept[name][:m] for name in names}
    if stats is not None:
        for name in names:
            stats[name] = {"read": read[name], "kept": m,
                           "chars": sum(_chars(x) for x in out[name])}
    return out


def placeholder_vocabulary(languages: Iterable[str], out_dir: str) -> str:
    """A tiny SentencePiece model with only the ``<2xx>`` tokens of ``languages``: enough to
    register tasks (registration checks the target-language token) before the real vocabulary
    is trained. Never tokenize with it."""
    from mnmt.data.vocab import train_vocabulary

    codes = sorted(set(languages))
    return train_vocabulary(["placeholder"], out_dir, len(codes) + 16, languages=codes,
                            name="placeholder")
