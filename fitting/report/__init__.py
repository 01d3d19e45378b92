"""The study report and its sections: fits, regime, figures → Markdown, HTML, PNG and JSON.

* :mod:`fitting.report.writer`    ``write_report``: the whole report of one study
* :mod:`fitting.report.sections`  the result record; frontier and quality-law sections
* :mod:`fitting.report.regime`    converged or compute-limited: cool-down branches or the slope
* :mod:`fitting.report.seeds`     repeated seeds: spread and the means every fit uses
* :mod:`fitting.report.heldout`   held-out runs predicted by the eq. 11 law
* :mod:`fitting.report.dpl`       Chen's Double Power Law section
* :mod:`fitting.report.chinchilla` Caillaut's L(N, D) section
* :mod:`fitting.report.bivariate` Ghorbani's encoder/decoder section
* :mod:`fitting.report.compare`   f(p) of several studies side by side (``mnmt-fit compare``)
* :mod:`fitting.report.markdown`  the document model and the reports' number format
* :mod:`fitting.report.cli_laws`  ``mnmt-fit fit``, ``frontier``, ``recommend``
* :mod:`fitting.report.cli_reports` ``mnmt-fit report``, ``compare``, ``mixture``
* :mod:`fitting.report.cli_inputs` their shared option and table parsing (the parser and
  the dispatch: :mod:`fitting.cli`)
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    "write_report": "writer",
    "Report": "sections",
    **dict.fromkeys(["Comparison", "write_comparison"], "compare"),
    **dict.fromkeys(["Document", "format_number"], "markdown"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
