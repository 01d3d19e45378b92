"""The output directory's lock: one `mnmt-study run` (or `prepare`) per directory at a time.

`acquire(out, command)` takes an OS advisory lock (`fcntl.flock`) on `OUT/.mnmt-study.lock`
without waiting, and writes who holds it into that file (pid, host, start time, command). A second
process asking for the lock gets `DirectoryInUse` at once, whose one-line message names the holder
and the lock file. The lock belongs to the open file: the kernel releases it when the holder
exits, however it exits (SIGKILL included), so a killed study never leaves a stuck lock; the file
itself stays behind and is simply taken again.

Two modes:
- exclusive (`run`, `prepare`): nobody else may hold the lock;
- shared (`run-one`): the processes of remote launches share it (every host of a multi-host run,
  and the runs of a SLURM job array, train side by side in one OUT), while a `run` or `prepare`
  on that directory is refused, and they are refused while one of those holds it.

Locks taken by this process are kept until `release_all()` (the `mnmt-study` entry point calls it
when its command ends) or until the process exits. On a network file system the lock is as good
as the file system's `flock` (NFS: emulated with byte-range locks, held across hosts).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
from pathlib import Path

__all__ = ["LOCK_FILE", "DirectoryInUse", "StudyLock", "acquire", "holders", "release_all"]

LOCK_FILE = ".mnmt-study.lock"


class DirectoryInUse(Exception):
    """Another process holds the directory's lock; the message (one line) names it."""


class StudyLock:
    """A lock held by this process (see the module docstring); `release()` gives it back."""

    def __init__(self, path: Path, fd: int, shared: bool) -> None:
        self.path, self.shared = path, shared
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        _HELD.pop(str(self.path), None)
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __enter__(self) -> StudyLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


_HELD: dict[str, StudyLock] = {}  # lock file -> the lock this process holds on it


def acquire(directory: Path | str, command: str, *, shared: bool = False) -> StudyLock:
    """Lock `directory` (created if missing) for `command` without waiting.

    Raises `DirectoryInUse` when another process holds the lock (exclusive: any holder; shared:
    an exclusive holder). Asking again for a lock this process already holds returns that lock.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    if str(path) in _HELD:
        return _HELD[str(path)]
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if _try_flock(fd, fcntl.LOCK_EX):
            # Alone: the holder record starts afresh with this process.
            os.ftruncate(fd, 0)
            _write_record(fd, command, shared)
            if shared and not _try_flock(fd, fcntl.LOCK_SH):
                # flock converts by unlocking first: an exclusive holder came in between.
                raise DirectoryInUse(_in_use_message(directory, path))
        elif shared and _try_flock(fd, fcntl.LOCK_SH):
            _write_record(fd, command, shared)  # appended next to the other shared holders
        else:
            raise DirectoryInUse(_in_use_message(directory, path))
    except BaseException:
        os.close(fd)
        raise
    lock = StudyLock(path, fd, shared)
    _HELD[str(path)] = lock
    return lock


def release_all() -> None:
    """Release every lock this process holds."""
    for lock in list(_HELD.values()):
        lock.release()


def holders(directory: Path | str) -> list[dict]:
    """The holder records in `directory`'s lock file (newest last), without the ones of
    processes known to have exited (same host, pid gone). [] without a lock file."""
    path = Path(directory) / LOCK_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and _maybe_alive(record):
                records.append(record)
    return records


def _try_flock(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _write_record(fd: int, command: str, shared: bool) -> None:
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "mode": "shared" if shared else "exclusive",
    }
    os.write(fd, (json.dumps(record) + "\n").encode("utf-8"))  # O_APPEND: one write, one line
    with contextlib.suppress(OSError):
        os.fsync(fd)


def _maybe_alive(record: dict) -> bool:
    if record.get("host") != socket.gethostname():
        return True  # another host's process: cannot tell
    try:
        os.kill(int(record.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError, OverflowError):
        return True  # e.g. another user's process
    return True


def _in_use_message(directory: Path, path: Path) -> str:
    found = holders(directory)
    if not found:
        who = "another process (it left no record)"
    else:
        last = found[-1]
        who = (f"mnmt-study {last.get('command') or '?'} (pid {last.get('pid')} on host "
               f"{last.get('host')}, started {last.get('started')})")
        if len(found) > 1:
            who += f" and {len(found) - 1} other process{'es' if len(found) > 2 else ''}"
    return (f"{directory} is in use by {who}; lock file {path}. Wait for it to end or stop it "
            "(the lock is released when it exits), or use another --out")
