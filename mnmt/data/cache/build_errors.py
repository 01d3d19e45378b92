"""What a failed token-cache build raises: one line naming the directory, what happened and
what to do (:class:`CacheBuildError`).

A Beam worker's error starts with :data:`ERROR_MARK`, so the driver finds its line inside the
runner's wrapped error (:func:`build_failure`); a full disk (ENOSPC, wherever it happened) gets
one message saying where, what to do and that the previous cache is unchanged.
"""

from __future__ import annotations

import os
import re

from fitting.data.io import is_no_space  # the one rule for a full disk (ENOSPC)
from mnmt.data.cache.layout import CacheError

__all__ = ["CacheBuildError", "ERROR_MARK", "is_no_space", "no_space_message", "build_failure"]

ERROR_MARK = "mnmt-cache error: "


class CacheBuildError(CacheError):
    """A build that failed (message: the file, what happened, what to do)."""


def no_space_message(task: str, tmp: str, what: str) -> str:
    """The message of a build that ran out of space: where, what to do, what was kept."""
    cache_dir = os.path.dirname(os.path.abspath(tmp))
    return (f"{cache_dir}: no space left on device while {what} of the cache of task {task!r}; "
            f"free space on that file system (or build into another cache_dir) and build again "
            f"— the unfinished build ({os.path.basename(tmp)}) was removed and the previous "
            "cache, if any, is unchanged")


def _failure_line(err: BaseException) -> str:
    """The one-line message of a worker's CacheBuildError inside a runner's wrapped error."""
    match = re.search(re.escape(ERROR_MARK) + r"(.*)", str(err))
    return match.group(1).strip() if match else ""


def build_failure(err: BaseException, task: str, tmp: str, log_path: str) -> BaseException:
    """What a failed build raises (its temporary directory already removed): a worker's own
    one-line error, a full disk (wherever it happened), else the error's last line and the
    workers' log; KeyboardInterrupt and the like unchanged."""
    line = _failure_line(err)
    if line:
        return CacheBuildError(line)
    if isinstance(err, CacheBuildError):
        return err
    if is_no_space(err):
        return CacheBuildError(no_space_message(task, tmp, "finishing"))
    if isinstance(err, Exception):
        last = str(err).strip().splitlines()[-1:] or [type(err).__name__]
        return CacheBuildError(f"building the cache of {task!r} failed: {last[0]} "
                               f"(the Beam workers' log: {log_path})")
    return err
