"""fitting: the scaling laws of the four papers, fitted robustly to exported metrics.

Pure numpy/scipy/pandas/matplotlib: importing this package never imports jax, tensorflow or mnmt.
The main entry points are importable from here lazily (the submodule is loaded on first use):

    from fitting import fit_power_law, fit_joint_law, fit_multilingual_law, write_report
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "FitResult": "fitting.base",
    "FitError": "fitting.base",
    "register_law": "fitting.base",
    "read_table": "fitting.tables",
    "write_table": "fitting.tables",
    "collect_runs": "fitting.rundirs",
    "fit_power_law": "fitting.power",
    "fit_joint_law": "fitting.joint",
    "fit_multilingual_law": "fitting.effective",
    "frontier_2pair": "fitting.frontier",
    "frontier_kpair": "fitting.frontier",
    "recommend": "fitting.frontier",
    "fit_bivariate_law": "fitting.bivariate",
    "fit_quality_law": "fitting.quality",
    "fit_learning_curve": "fitting.learning_curve",
    "write_report": "fitting.report",
    "write_comparison": "fitting.compare",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fitting' has no attribute {name!r}")
