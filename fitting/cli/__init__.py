"""``mnmt-fit``: the command line of :mod:`fitting`, one module per group of subcommands.

* :mod:`fitting.cli.entry`   ``main`` and ``build_parser``: the parser, the dispatch, the printing
* :mod:`fitting.cli.laws`    ``mnmt-fit fit``, ``frontier``, ``recommend``
* :mod:`fitting.cli.reports` ``mnmt-fit report``, ``compare``, ``mixture``
* :mod:`fitting.cli.curves`  ``mnmt-fit curves``
* :mod:`fitting.cli.design`  ``mnmt-fit design``
* :mod:`fitting.cli.inputs`  what the subcommands share: option values, the input table, fit options

The command line sits above every other room of :mod:`fitting`; nothing in the package imports it.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = dict.fromkeys(["main", "build_parser"], "entry")
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
