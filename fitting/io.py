"""Local and remote paths behind one API, shared by :mod:`fitting` and :mod:`mnmt`.

One rule decides what is remote: a path containing ``"://"`` (``gs://``, ``s3://``, ``hdfs://``,
…). Remote paths go through ``tensorflow.io.gfile``, imported on first remote use only, so that
importing :mod:`fitting` never imports tensorflow; local paths use the standard library. Text
files are UTF-8.

    from fitting import io
    with io.open_file(io.join(model_dir, "run.json")) as f:
        meta = json.load(f)
"""

from __future__ import annotations

import glob as _glob
import os
from collections.abc import Iterator
from typing import IO, Any

from fitting.base import FitError

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
]

PathLike = str | os.PathLike


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
