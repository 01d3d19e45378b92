"""Lazy re-exports for the packages of :mod:`fitting` (PEP 562).

Each package's ``__init__`` names its public surface as ``{name: submodule}``; a name is imported
from its submodule on first use, so ``import fitting.data`` (which :mod:`mnmt` does on every
start) does not pull scipy or matplotlib in through a sibling it never uses.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of `package` for `exports` (public name → the module,
    relative to `package`, that defines it); ``__all__`` lists the names."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
