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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["BitextError", "BitextStats", "read_bitext", "count_bitext", "register_bitext_task"]

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


def _open_lines(path: str) -> Iterator[bytes]:
    from fitting.data.io import is_remote

    if is_remote(path):
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"bitext file not found: {path}")
        opener = tf.io.gfile.GFile(path, "rb")
    elif not os.path.isfile(path):
        raise FileNotFoundError(f"bitext file not found: {path}")
    else:
        opener = open(path, "rb")  # noqa: SIM115  (closed by the with below; C readline, fast)
    with opener as raw:
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

    def bad(msg: str) -> None:
        if not skip_malformed:
            raise BitextError(msg)
        st.skip(msg.split(": ", 1)[1].split(";")[0])

    if tgt_path is None:
        for lineno, raw in enumerate(_open_lines(path), start=1):
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
    else:
        it_s, it_t = _open_lines(path), _open_lines(tgt_path)
        lineno = 0
        while True:
            rs, rt = next(it_s, None), next(it_t, None)
            lineno += 1
            if rs is None and rt is None:
                break
            if rs is None or rt is None:
                short, longer = (path, tgt_path) if rs is None else (tgt_path, path)
                raise BitextError(
                    f"{short}:{lineno}: file ends after {lineno - 1} lines but {longer} continues; "
                    "expected aligned files with the same number of lines"
                )
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
    if st.skipped:
        log.warning("bitext %s: read %d pairs, skipped %d malformed line(s): %s",
                    path if tgt_path is None else f"{path} + {tgt_path}", st.read, st.skipped,
                    st.reasons)


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

    return register_text_task(
        name, pair, vocab_path, {s: reader(p, q) for s, (p, q) in files.items()},
        split_sizes=sizes,
        definition=definition,
    )


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
