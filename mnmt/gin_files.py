"""Parsing gin files the way `mnmt-train` and `mnmt-study` need: quiet include search, clear errors.

gin looks an `include` (or a `--gin_file`) up in each search path in turn and logs an ERROR line
("Path not found: …") for every path that does not have it — even when a later path does. When no
path has it gin raises, naming every path it searched, so those per-path lines only alarm users
of a run that works. They are dropped here; a file found nowhere becomes a `FileNotFoundError`
with gin's message (the command-line tools print it as one line).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence

import gin

_GIN_PATH_MISS = "Path not found: %s"  # gin.resource_reader's message for one search-path miss


class _DropSearchPathMisses(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _GIN_PATH_MISS


@contextlib.contextmanager
def quiet_include_search() -> Iterator[None]:
    """Drop gin's per-search-path "Path not found" records (logged on the root logger)."""
    root, drop = logging.getLogger(), _DropSearchPathMisses()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def parse_files_and_bindings(files: Sequence[str], bindings: Sequence[str], *,
                             finalize_config: bool = False, skip_unknown: bool = False) -> None:
    """`gin.parse_config_files_and_bindings` without the search noise; a missing file or include
    raises FileNotFoundError naming it and the paths searched."""
    with quiet_include_search():
        try:
            gin.parse_config_files_and_bindings(list(files), list(bindings),
                                                finalize_config=finalize_config,
                                                skip_unknown=skip_unknown)
        except FileNotFoundError:
            raise
        except OSError as err:  # gin raises a bare IOError when no search path has the file
            raise FileNotFoundError(str(err).splitlines()[0]) from err
