"""Bitext files as SeqIO tasks: TSV (``src<TAB>tgt``) or two aligned plain-text files.

Paths may be local or any filesystem ``tf.io.gfile`` knows (``gs://…``); a ``.gz`` suffix means
gzip. Malformed lines — a wrong number of columns, an empty side, invalid UTF-8, aligned files of
different lengths — raise :class:`BitextError` naming the file and line, or, with
``skip_malformed=True``, are skipped and counted (:class:`BitextStats`, logged when a pass over
the file ends).
"""

from __future__ import annotations

import gzip
import logging
import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from mnmt.data.sources.parts import ReadCount, attach, even_ranges

__all__ = ["BitextError", "BitextStats", "BitextParts", "read_bitext", "count_bitext",
           "register_bitext_task"]

log = logging.getLogger(__name__)


class BitextError(ValueError):
    """A malformed bitext line (message: ``path:line: what was wrong; what was expected``)."""


@dataclass
class BitextStats:
    """Counts of one pass over a bitext source."""

    read: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


def _open_binary(path: str):
    """A binary file object of a local or ``tf.io.gfile`` path (FileNotFoundError naming it)."""
    from fitting.data.io import is_remote

    if is_remote(path):
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"bitext file not found: {path}")
        return tf.io.gfile.GFile(path, "rb")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"bitext file not found: {path}")
    return open(path, "rb")  # noqa: SIM115  (closed by the caller's with; C readline, fast)


def _file_size(path: str) -> int:
    from fitting.data.io import is_remote

    if is_remote(path):
        import tensorflow as tf

        return int(tf.io.gfile.stat(path).length)
    return os.path.getsize(path)


def _open_lines(path: str) -> Iterator[bytes]:
    with _open_binary(path) as raw:
        f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
        try:
            yield from f
        except (OSError, EOFError, zlib.error) as e:  # zlib.error: a corrupt deflate stream
            raise BitextError(f"{path}: cannot read ({e}); expected a valid gzip or text file") from e


def _decode(raw: bytes, path: str, lineno: int) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BitextError(
            f"{path}:{lineno}: invalid UTF-8 at byte {e.start} ({e.reason}); expected UTF-8 text"
        ) from None
    return text.rstrip("\r\n")


def read_bitext(
    path: str,
    tgt_path: str | None = None,
    *,
    skip_malformed: bool = False,
    stats: BitextStats | None = None,
    columns: tuple[int, int] | None = None,
) -> Iterator[tuple[str, str]]:
    """Yield (source, target) pairs of a TSV file, or of two aligned files (``tgt_path``).

    A TSV line must have exactly two tab-separated columns, unless ``columns=(i, j)`` picks two
    of more. Sides are stripped of surrounding whitespace and must be non-empty.
    """
    st = stats if stats is not None else BitextStats()
    if tgt_path is None:
        yield from _tsv_pairs(enumerate(_open_lines(path), start=1), path, skip_malformed,
                              columns, st)
    else:
        yield from _aligned_pairs(_aligned_lines(path, tgt_path), path, tgt_path,
                                  skip_malformed, st)
    _log_skipped(path, tgt_path, st)


def _log_skipped(path: str, tgt_path: str | None, st: BitextStats) -> None:
    if st.skipped:
        log.warning("bitext %s: read %d pairs, skipped %d malformed line(s): %s",
                    path if tgt_path is None else f"{path} + {tgt_path}", st.read, st.skipped,
                    st.reasons)


def _rejecter(skip_malformed: bool, st: BitextStats):
    """What a malformed line does: raise :class:`BitextError`, or count it as skipped."""

    def bad(msg: str) -> None:
        if not skip_malformed:
            raise BitextError(msg)
        st.skip(msg.split(": ", 1)[1].split(";")[0])

    return bad


def _tsv_pairs(lines: Iterable[tuple[object, bytes]], path: str, skip_malformed: bool,
               columns: tuple[int, int] | None, st: BitextStats) -> Iterator[tuple[str, str]]:
    """The pairs of TSV lines given as (where, raw line); ``where`` names the line in errors."""
    bad = _rejecter(skip_malformed, st)
    for lineno, raw in lines:
        try:
            line = _decode(raw, path, lineno)
        except BitextError as e:
            bad(str(e))
            continue
        if not line.strip():
            bad(f"{path}:{lineno}: empty line; expected 'source<TAB>target'")
            continue
        cols = line.split("\t")
        if columns is None:
            if len(cols) != 2:
                bad(f"{path}:{lineno}: {len(cols)} tab-separated column(s); expected exactly 2 "
                    "('source<TAB>target')")
                continue
            src, tgt = cols
        else:
            need = max(columns) + 1
            if len(cols) < need:
                bad(f"{path}:{lineno}: {len(cols)} column(s); expected at least {need}")
                continue
            src, tgt = cols[columns[0]], cols[columns[1]]
        src, tgt = src.strip(), tgt.strip()
        if not src or not tgt:
            side = "source" if not src else "target"
            bad(f"{path}:{lineno}: empty {side} side; expected non-empty text on both sides")
            continue
        st.read += 1
        yield src, tgt


def _aligned_lines(path: str, tgt_path: str) -> Iterator[tuple[int, bytes, bytes]]:
    """(line number, source line, target line) of two aligned files; BitextError where one
    file ends before the other."""
    it_s, it_t = _open_lines(path), _open_lines(tgt_path)
    lineno = 0
    while True:
        rs, rt = next(it_s, None), next(it_t, None)
        lineno += 1
        if rs is None and rt is None:
            return
        if rs is None or rt is None:
            short, longer = (path, tgt_path) if rs is None else (tgt_path, path)
            raise BitextError(
                f"{short}:{lineno}: file ends after {lineno - 1} lines but {longer} continues; "
                "expected aligned files with the same number of lines"
            )
        yield lineno, rs, rt


def _aligned_pairs(lines: Iterable[tuple[object, bytes, bytes]], path: str, tgt_path: str,
                   skip_malformed: bool, st: BitextStats) -> Iterator[tuple[str, str]]:
    """The pairs of aligned (where, source line, target line) triples."""
    bad = _rejecter(skip_malformed, st)
    for lineno, rs, rt in lines:
        try:
            src = _decode(rs, path, lineno).strip()
            tgt = _decode(rt, tgt_path, lineno).strip()
        except BitextError as e:
            bad(str(e))
            continue
        if not src or not tgt:
            which = path if not src else tgt_path
            bad(f"{which}:{lineno}: empty line; expected non-empty aligned text")
            continue
        st.read += 1
        yield src, tgt


_CHUNK = 1 << 22  # bytes per read of a part's byte range


@dataclass(frozen=True)
class BitextParts:
    """The blocks a cache build's parts read (:mod:`mnmt.data.sources.parts`): byte ranges of
    uncompressed files, cut at line starts, so each part reads only its bytes — of a TSV file
    directly, of two aligned files after the driver scans both once for the matching cuts;
    gzip files: line ranges, a part reading the lines before its block without parsing them
    (a gzip stream cannot be entered in the middle) and counting them as read."""

    files: dict[str, tuple[str, str | None]]
    skip_malformed: bool = False
    columns: tuple[int, int] | None = None

    def plan(self, split: str, num_parts: int, count: ReadCount) -> list[tuple]:
        path, tgt_path = self.files[split]
        gz = path.endswith(".gz") or (tgt_path or "").endswith(".gz")
        if not gz:
            cuts = _line_starts(path, num_parts, count)
            if tgt_path is None:
                return [("bytes", lo, hi) for lo, hi in zip(cuts, cuts[1:], strict=False)]
            before = _lines_before(path, cuts, count)
            total = _line_count(path, before[-1])
            # a cut at the end of a file whose last line has no newline is after that line
            lines = [total if c == cuts[-1] else n for c, n in zip(cuts, before, strict=True)]
            tgt_cuts = _aligned_cuts(path, tgt_path, lines[:-1], total, count)
            return [("aligned", (cuts[k], cuts[k + 1]), (tgt_cuts[k], tgt_cuts[k + 1]), lines[k])
                    for k in range(len(cuts) - 1)]
        lines = 0
        for raw in _open_lines(path):  # the number of lines: one pass
            lines += 1
            count.bytes += len(raw)
        return [("lines", lo, hi) for lo, hi in even_ranges(lines, num_parts)]

    def read(self, split: str, block: tuple, count: ReadCount) -> Iterator[tuple[str, str]]:
        path, tgt_path = self.files[split]
        kind = block[0]
        st = BitextStats()
        if kind == "bytes":
            yield from _tsv_pairs(_byte_range_lines(path, block[1], block[2], count), path,
                                  self.skip_malformed, self.columns, st)
        elif kind == "aligned":
            _, (lo, hi), (tlo, thi), first = block
            targets = ReadCount()
            lines = ((first + k, rs, rt) for k, ((_, rs), (_, rt)) in enumerate(
                zip(_byte_range_lines(path, lo, hi, count),
                    _byte_range_lines(tgt_path, tlo, thi, targets), strict=True), start=1))
            yield from _aligned_pairs(lines, path, tgt_path, self.skip_malformed, st)
            count.bytes += targets.bytes
        elif tgt_path is None:
            lo, hi = block[1:]
            lines = ((n, raw) for n, (raw,) in _line_range((path,), lo, hi, count))
            yield from _tsv_pairs(lines, path, self.skip_malformed, self.columns, st)
        else:
            lo, hi = block[1:]
            lines = ((n, rs, rt) for n, (rs, rt) in _line_range((path, tgt_path), lo, hi, count))
            yield from _aligned_pairs(lines, path, tgt_path, self.skip_malformed, st)
        _log_skipped(path, tgt_path, st)


def _lines_before(path: str, offsets: Sequence[int], count: ReadCount) -> list[int]:
    """The number of newlines before each byte offset (ascending) of a file: one pass."""
    out: list[int] = []
    lines = pos = 0
    with _open_binary(path) as f:
        while len(out) < len(offsets):
            block = f.read(_CHUNK)
            count.bytes += len(block)
            while len(out) < len(offsets) and (offsets[len(out)] <= pos + len(block) or not block):
                out.append(lines + block.count(b"\n", 0, max(0, offsets[len(out)] - pos)))
            lines += block.count(b"\n")
            pos += len(block)
    return out


def _line_count(path: str, newlines: int) -> int:
    """A file's number of lines from its number of newlines (a last line may lack one)."""
    size = _file_size(path)
    if size == 0:
        return 0
    with _open_binary(path) as f:
        f.seek(size - 1)
        return newlines + (f.read(1) != b"\n")


def _aligned_cuts(path: str, tgt_path: str, lines: Sequence[int], total: int,
                  count: ReadCount) -> list[int]:
    """The byte offsets where lines ``lines`` (0-based, ascending) start in the target file,
    then its size; BitextError unless it has ``total`` lines as the source has: one pass."""
    out: list[int] = []
    seen = pos = 0
    last = b"\n"
    with _open_binary(tgt_path) as f:
        while block := f.read(_CHUNK):
            count.bytes += len(block)
            at = -1
            while len(out) < len(lines) and lines[len(out)] <= seen + block.count(b"\n", at + 1):
                while seen < lines[len(out)]:
                    at = block.index(b"\n", at + 1)
                    seen += 1
                out.append(pos + at + 1)
            seen += block.count(b"\n", at + 1)
            pos += len(block)
            last = block[-1:]
    lines_here = seen + (last != b"\n")
    if lines_here != total:
        short, longer = (path, tgt_path) if total < lines_here else (tgt_path, path)
        raise BitextError(f"{short}: {min(total, lines_here)} lines but {longer} has "
                          f"{max(total, lines_here)}; expected aligned files with the same "
                          "number of lines")
    return [*out, *[pos] * (len(lines) - len(out)), pos]


def _line_starts(path: str, num_parts: int, count: ReadCount) -> list[int]:
    """``num_parts + 1`` byte offsets cutting a file into ranges of whole lines of about equal
    size: the first line start at or after each even cut (reads one line per cut)."""
    size = _file_size(path)
    cuts = [0]
    with _open_binary(path) as f:
        for p in range(1, max(1, num_parts)):
            at = max(size * p // num_parts, cuts[-1])
            if at == 0:
                cuts.append(0)
                continue
            f.seek(at - 1)
            rest = f.readline()  # through the newline ending the line that holds byte at - 1
            count.bytes += len(rest)
            cuts.append(min(at - 1 + len(rest), size))
    cuts.append(size)
    return cuts


def _byte_range_lines(path: str, lo: int, hi: int, count: ReadCount,
                      ) -> Iterator[tuple[str, bytes]]:
    """(``"byte N"``, line) of the whole lines in bytes ``[lo, hi)`` of a file (``lo`` and
    ``hi`` at line starts), reading only those bytes."""
    with _open_binary(path) as f:
        f.seek(lo)
        pos, carry = lo, b""
        while pos < hi:
            block = f.read(min(_CHUNK, hi - pos))
            if not block:
                break
            start = pos - len(carry)  # the offset of carry + block
            pos += len(block)
            count.bytes += len(block)
            lines = (carry + block).split(b"\n")
            carry = lines.pop()
            for line in lines:
                count.examples += 1
                yield f"byte {start}", line
                start += len(line) + 1
        if carry:
            count.examples += 1
            yield f"byte {hi - len(carry)}", carry


def _line_range(paths: tuple[str, ...], lo: int, hi: int, count: ReadCount,
                ) -> Iterator[tuple[int, tuple[bytes, ...]]]:
    """(line number, lines) of lines ``[lo, hi)`` (0-based) of aligned files, reading the
    lines before ``lo`` unparsed; BitextError where the files' lengths differ."""
    if len(paths) == 1:
        numbered = ((n, (raw,)) for n, raw in enumerate(_open_lines(paths[0]), start=1))
    else:
        numbered = ((n, (rs, rt)) for n, rs, rt in _aligned_lines(*paths))
    for lineno, raws in numbered:
        if lineno > hi:
            break
        count.examples += 1
        count.bytes += sum(len(r) for r in raws)
        if lineno > lo:
            yield lineno, raws


def count_bitext(path: str, tgt_path: str | None = None, **kwargs) -> BitextStats:
    """One full validating pass; returns the counts (raises on the first bad line by default)."""
    st = BitextStats()
    for _ in read_bitext(path, tgt_path, stats=st, **kwargs):
        pass
    return st


def register_bitext_task(
    name: str,
    pair: str,
    vocab_path: str,
    splits: Mapping[str, str | tuple[str, str]],
    *,
    skip_malformed: bool = False,
    columns: tuple[int, int] | None = None,
    validate: bool = True,
    cache_dirs: Sequence[str] = (),
) -> str:
    """Register a seqio task over bitext files; ``splits`` maps split → TSV path or
    (source path, target path). With ``validate`` every file is read once now: sizes become
    known (for temperature weights) and bad files fail at registration, not mid-training —
    except a training split whose token cache in ``cache_dirs`` was built from these very
    files (same names, sizes and modification times): its build read every line with the
    same rules, so its size comes from the cache's index and the corpus is not read again.
    """
    from mnmt.data.tasks import register_text_task

    if not splits:
        raise ValueError(f"bitext task {name!r}: expected at least one split (e.g. 'train')")
    files: dict[str, tuple[str, str | None]] = {}
    for split, spec in splits.items():
        if isinstance(spec, str):
            files[split] = (spec, None)
        elif isinstance(spec, tuple | list) and len(spec) == 2:
            files[split] = (str(spec[0]), str(spec[1]))
        else:
            raise ValueError(
                f"bitext task {name!r}, split {split!r}: expected a TSV path or a (source, target) "
                f"pair of paths, got {spec!r}"
            )
    definition = {"kind": "bitext", "files": {s: list(v) for s, v in files.items()},
                  "skip_malformed": skip_malformed, "columns": columns}
    cached = _cached_train_size(name, pair, definition, cache_dirs) if validate else None
    sizes: dict[str, int | None] = {}
    for split, (p, q) in files.items():
        if split == "train" and cached is not None:
            sizes[split] = cached
        elif validate:
            n = count_bitext(p, q, skip_malformed=skip_malformed, columns=columns).read
            if n == 0:
                raise ValueError(f"bitext task {name!r}, split {split!r}: no usable lines in {p}"
                                 + (f" + {q}" if q else ""))
            sizes[split] = n
        else:
            sizes[split] = None

    def reader(p: str, q: str | None):
        return lambda: read_bitext(p, q, skip_malformed=skip_malformed, columns=columns)

    registered = register_text_task(
        name, pair, vocab_path, {s: reader(p, q) for s, (p, q) in files.items()},
        split_sizes=sizes,
        definition=definition,
    )
    attach(registered, BitextParts(files, skip_malformed, columns))
    return registered


def _cached_train_size(name: str, pair: str, definition: Mapping, cache_dirs: Sequence[str],
                       ) -> int | None:
    """Examples of the training split according to a complete token cache of this very task
    (same definition and files) in ``cache_dirs``; None when there is none."""
    if not cache_dirs:
        return None
    from mnmt.data.cache import find_task_cache, layout
    from mnmt.data.cache.build import read_complete_index
    from mnmt.data.tasks import task_definition

    path = find_task_cache(name, cache_dirs)
    index = read_complete_index(path) if path else None
    if index is None or index.split != "train":
        return None
    wanted = layout.source_fingerprint(task_definition(pair, "", definition))
    return index.examples if index.source.get("fingerprint") == wanted else None
