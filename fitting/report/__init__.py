"""The study report: the writer, the prepared view every section reads, the document model,
and the sections themselves (:mod:`fitting.report.sections.frontier`, one module per section).

* :mod:`fitting.report.writer`     ``write_report``: the whole report of one study, its ``SECTIONS``
* :mod:`fitting.report.sections`   the sections, one module each, in the report's order
* :mod:`fitting.report.options`    ``ReportOptions``: what a report is asked for
* :mod:`fitting.report.section`    ``Section``, ``SectionRun``, ``register_section``
* :mod:`fitting.report.view`       ``prepare_view``: the one view of a study the sections read
* :mod:`fitting.report.record`     ``Report``: what a report wrote and computed
* :mod:`fitting.report.markdown`   the document model and the reports' number format
* :mod:`fitting.report.predicted_budgets` planned cooled-down budgets predicted for L(N, D)
* :mod:`fitting.report.fewer_branches` one trained branch per size against all, side by side
* :mod:`fitting.report.compare`    f(p) of several studies side by side (``mnmt-fit compare``)

The command line that writes these documents is :mod:`fitting.cli`.
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["write_report", "SECTIONS"], "writer"),
    "ReportOptions": "options",
    **dict.fromkeys(["Section", "ReportSection", "SectionRun", "register_section"], "section"),
    "Report": "record",
    **dict.fromkeys(["StudyView", "prepare_view"], "view"),
    **dict.fromkeys(["Comparison", "write_comparison"], "compare"),
    **dict.fromkeys(["Document", "format_number"], "markdown"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
