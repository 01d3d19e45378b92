"""fitting: the scaling laws of the four papers, fitted robustly to exported metrics.

Pure numpy/scipy/pandas/matplotlib: importing this package never imports jax, tensorflow or mnmt.
The main entry points are importable from here lazily (the submodule is loaded on first use):

    from fitting import fit_power_law, fit_joint_law, fit_multilingual_law, write_report

Its rooms, each importing only from itself and those listed after it:
:mod:`fitting.cli` (``mnmt-fit``), :mod:`fitting.report` (the study report),
:mod:`fitting.plots` (figures), :mod:`fitting.design` (what to train next),
:mod:`fitting.intervals` (predictive intervals), :mod:`fitting.laws` (the laws),
:mod:`fitting.data` (metrics in and out), :mod:`fitting.core` (result, engine, options,
uncertainty); :mod:`fitting.test_utils` (synthetic studies for tests) sits on top.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    **dict.fromkeys(["FitResult", "FitError", "register_law"], "core.base"),
    **dict.fromkeys(["read_table", "write_table"], "data.tables"),
    "collect_runs": "data.rundirs",
    "fit_power_law": "laws.size.power",
    "fit_joint_law": "laws.size.joint",
    "fit_multilingual_law": "laws.size.effective",
    **dict.fromkeys(["frontier_2pair", "frontier_kpair", "recommend"], "laws.size.frontier"),
    "fit_bivariate_law": "laws.size.bivariate",
    "fit_quality_law": "laws.quality",
    "fit_learning_curve": "laws.curves.learning_curve",
    "write_report": "report.writer",
    "ReportOptions": "report.options",
    "register_section": "report.section",
    "write_comparison": "report.compare",
}
__all__ = ["__version__", *sorted(_EXPORTS)]
__getattr__ = lazy_exports(__name__, _EXPORTS)
