"""How the parts of a cache build read only their share of a split.

A token-cache build (:mod:`mnmt.data.cache.build`) splits a task's split into ``P`` contiguous
blocks of examples, one per part: the driver asks the task's :class:`SplitParts` for a
``plan`` (one small, picklable description per block: byte ranges of a TSV file, line ranges
of aligned files, index ranges of a TFDS split or of an in-memory list), and each part
``read``\\ s its block, counting what it read from the source in a :class:`ReadCount`. The blocks
concatenated in plan order are exactly the split in the order :attr:`TaskInfo.text_stream`
yields it, so example ids do not depend on the number of parts.

A source registers its reader with :func:`attach`; a task without one gets
:class:`StreamParts`, which reads the task's text stream from its start up to the end of the
block (total reading then grows with the number of parts: the cost this module removes for
the sources that have a reader).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

__all__ = ["ReadCount", "SplitParts", "ListParts", "StreamParts", "attach", "split_parts",
           "even_ranges"]

_KEY = "split_parts"


@dataclasses.dataclass
class ReadCount:
    """What one part read from the source: examples (lines or records, kept or skipped on
    the way to its block) and bytes (0 where the source is not files this code reads)."""

    examples: int = 0
    bytes: int = 0


class SplitParts(Protocol):
    """A source's reader of contiguous blocks of a split (see the module docstring)."""

    def plan(self, split: str, num_parts: int, count: ReadCount) -> list[Any]:
        """At most ``num_parts`` block descriptions, in order (run once, in the driver; what
        planning reads, e.g. a scan for line boundaries, is added to ``count``)."""

    def read(self, split: str, block: Any, count: ReadCount) -> Iterator[tuple[str, str]]:
        """The (source, target) pairs of one block, adding what is read to ``count``."""


def even_ranges(total: int, num_parts: int) -> list[tuple[int, int]]:
    """``num_parts`` contiguous ``[lo, hi)`` ranges covering ``range(total)``, sizes within one."""
    parts = max(1, int(num_parts))
    return [(total * p // parts, total * (p + 1) // parts) for p in range(parts)]


@dataclasses.dataclass(frozen=True)
class ListParts:
    """Splits held in memory (e.g. gettext pairs, deduplicated over every domain at
    registration): a block is an index range; a part reads only its examples."""

    splits: dict[str, Callable[[], Sequence[tuple[str, str]]]]

    def plan(self, split: str, num_parts: int, count: ReadCount) -> list[tuple[int, int]]:
        return even_ranges(len(self.splits[split]()), num_parts)

    def read(self, split: str, block: tuple[int, int], count: ReadCount,
             ) -> Iterator[tuple[str, str]]:
        lo, hi = block
        for pair in self.splits[split]()[lo:hi]:
            count.examples += 1
            yield pair


@dataclasses.dataclass(frozen=True)
class StreamParts:
    """Any task with a text stream and a known split size: part ``p`` reads the stream from
    the block's start (a stream may have to read the examples before it: counted as read)."""

    stream: Callable[..., Iterator[tuple[str, str]]]
    sizes: dict[str, int | None]

    def plan(self, split: str, num_parts: int, count: ReadCount,
             ) -> list[tuple[int, int | None]]:
        size = self.sizes.get(split)
        if size is None:
            return [(0, None)]  # unknown length: one part reads it all
        return even_ranges(size, num_parts)

    def read(self, split: str, block: tuple[int, int | None], count: ReadCount,
             ) -> Iterator[tuple[str, str]]:
        lo, hi = block
        count.examples += lo  # the stream may have read these to get to lo
        for i, pair in enumerate(self.stream(split, lo, None)):
            if hi is not None and lo + i >= hi:
                break
            count.examples += 1
            yield pair


def attach(task_name: str, parts: SplitParts) -> None:
    """Give a registered task the block reader its cache builds use."""
    from mnmt.data.tasks import get_task_info

    get_task_info(task_name).extra[_KEY] = parts


def split_parts(info: Any) -> SplitParts:
    """The block reader of a task (:func:`attach`), or :class:`StreamParts` over its stream."""
    parts = info.extra.get(_KEY)
    if parts is not None:
        return parts
    if info.text_stream is None:
        raise ValueError(f"task {info.name!r} has no text stream to read")
    return StreamParts(info.text_stream, dict(info.split_sizes))
