"""Local and remote paths behind one API, shared by :mod:`fitting` and :mod:`mnmt`.

One rule decides what is remote: a path containing ``"://"`` (``gs://``, ``s3://``, ``hdfs://``,
…). Remote paths go through ``tensorflow.io.gfile``, imported on first remote use only, so that
importing :mod:`fitting` never imports tensorflow; local paths use the standard library. Text
files are UTF-8.

Writes that replace a file go through :func:`write_files_atomic` (a temporary name, then a
rename), so a failed write leaves the previous version; a write that fails because the device
is full raises :class:`NoSpaceError`, whose one-line message names the file.

    from fitting.data import io
    with io.open_file(io.join(model_dir, "run.json")) as f:
        meta = json.load(f)
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import os
from collections.abc import Iterator, Mapping
from typing import IO, Any

from fitting.core.base import FitError

__all__ = [
    "is_remote",
    "open_file",
    "exists",
    "isdir",
    "listdir",
    "join",
    "makedirs",
    "rename",
    "glob",
    "walk",
    "NoSpaceError",
    "is_no_space",
    "write_files_atomic",
    "write_text_atomic",
]

PathLike = str | os.PathLike

NO_SPACE = "no space left on device"


class NoSpaceError(OSError):
    """A write failed because the device is full (ENOSPC); the message (one line) names the file
    and says that the previous version of it is intact."""

    def __init__(self, path: PathLike, detail: str = "") -> None:
        super().__init__(f"{os.fspath(path)}: {NO_SPACE}{detail}; the previous version is intact, "
                         "free space and run again")
        self.errno = errno.ENOSPC
        self.path = os.fspath(path)


def is_no_space(err: BaseException | None) -> bool:
    """Whether ``err`` or an exception it came from (``__cause__``, else ``__context__``; a cycle
    ends the walk) reports a full device: an ``errno`` of ``errno.ENOSPC`` (an ``OSError``, or any
    error carrying one), or a message saying so in any case (Orbax and TensorStore wrap the OS
    error; ArrayRecord's writer raises a RuntimeError whose text says it)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if getattr(err, "errno", None) == errno.ENOSPC:
            return True
        if NO_SPACE in str(err).lower():
            return True
        err = err.__cause__ or err.__context__
    return False


def is_remote(path: PathLike) -> bool:
    """True for URLs (``"://"`` in the path: ``gs://``, ``s3://``, …), False for local paths."""
    return "://" in os.fspath(path)


def _gfile(path: str) -> Any:
    """``tensorflow.io.gfile``, imported here (not at module level) so that fitting stays free of
    tensorflow unless a remote path is actually used. Looked up on every call, so a test may
    replace the module's functions."""
    try:
        from tensorflow.io import gfile
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise FitError(f"{path}: remote paths need tensorflow (tensorflow.io.gfile): {e}",
                       source=path) from e
    return gfile


def open_file(path: PathLike, mode: str = "r") -> IO:
    """Open ``path`` (text modes as UTF-8); remote paths through ``tf.io.gfile.GFile``."""
    path = os.fspath(path)
    if is_remote(path):
        return _gfile(path).GFile(path, mode)
    return open(path, mode, encoding=None if "b" in mode else "utf-8")


def exists(path: PathLike) -> bool:
    """Whether a file or directory exists at ``path``."""
    path = os.fspath(path)
    if is_remote(path):
        return bool(_gfile(path).exists(path))
    return os.path.exists(path)


def isdir(path: PathLike) -> bool:
    """Whether ``path`` is a directory."""
    path = os.fspath(path)
    if is_remote(path):
        return bool(_gfile(path).isdir(path))
    return os.path.isdir(path)


def listdir(path: PathLike) -> list[str]:
    """Sorted entry names of the directory ``path`` (no trailing ``/`` on remote directories)."""
    path = os.fspath(path)
    if is_remote(path):
        return sorted(name.rstrip("/") for name in _gfile(path).listdir(path))
    return sorted(os.listdir(path))


def join(*parts: PathLike) -> str:
    """``os.path.join`` for local paths; ``/``-joining without doubled slashes for URLs."""
    strs = [os.fspath(p) for p in parts]
    if is_remote(strs[0]):
        return "/".join([strs[0].rstrip("/")] + [p.strip("/") for p in strs[1:]])
    return os.path.join(*strs)


def makedirs(path: PathLike) -> None:
    """Create the directory ``path`` and its parents; no error when it exists."""
    path = os.fspath(path)
    if is_remote(path):
        _gfile(path).makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def rename(src: PathLike, dst: PathLike, overwrite: bool = True) -> None:
    """Move ``src`` to ``dst``. Locally an atomic ``os.replace`` (readers see the old file or the
    new one, never half of one); without ``overwrite`` an existing ``dst`` raises
    FileExistsError."""
    src, dst = os.fspath(src), os.fspath(dst)
    if is_remote(src):
        if not overwrite and exists(dst):  # FileExistsError on every file system
            raise FileExistsError(dst)
        _gfile(src).rename(src, dst, overwrite=overwrite)
    elif overwrite:
        os.replace(src, dst)
    else:
        if os.path.exists(dst):
            raise FileExistsError(dst)
        os.rename(src, dst)


def glob(pattern: PathLike) -> list[str]:
    """Sorted paths matching the shell pattern (``*``, ``?``, ``[…]``)."""
    pattern = os.fspath(pattern)
    if is_remote(pattern):
        return sorted(_gfile(pattern).glob(pattern))
    return sorted(_glob.glob(pattern))


def walk(top: PathLike) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` (top-down ``(dirpath, dirnames, filenames)``; prune by editing ``dirnames``)."""
    top = os.fspath(top)
    if is_remote(top):
        yield from _gfile(top).walk(top)
    else:
        yield from os.walk(top)


def write_files_atomic(contents: Mapping[str, str | bytes]) -> None:
    """Write every ``path -> text or bytes`` of ``contents`` to a temporary name, then rename
    them all into place: a write that fails (a full disk) leaves each file as it was.

    Raises :class:`NoSpaceError` naming the file being written when the device is full (the
    temporary files are removed); other errors propagate after the same clean-up."""
    tmps: dict[str, str] = {}
    path = ""
    try:
        for path, data in contents.items():
            tmps[path] = f"{path}.tmp-{os.getpid()}"
            with open_file(tmps[path], "wb" if isinstance(data, bytes) else "w") as f:
                f.write(data)
                if not is_remote(path):
                    f.flush()
                    os.fsync(f.fileno())
        for path, tmp in tmps.items():
            rename(tmp, path)
    except Exception as err:
        for tmp in tmps.values():
            _remove_quietly(tmp)
        if is_no_space(err):
            raise NoSpaceError(path) from err
        raise


def write_text_atomic(path: PathLike, text: str | bytes) -> None:
    """Replace the file ``path`` by ``text`` atomically (:func:`write_files_atomic`)."""
    write_files_atomic({os.fspath(path): text})


def _remove_quietly(path: str) -> None:
    """Remove ``path`` if it exists (clean-up after a failed write; never raises)."""
    with contextlib.suppress(Exception):
        if is_remote(path):
            if exists(path):
                _gfile(path).remove(path)
        elif os.path.exists(path):
            os.remove(path)
