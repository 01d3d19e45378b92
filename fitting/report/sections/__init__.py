"""The report's sections, one module per section, listed in the order the report shows them.

* :mod:`~fitting.report.sections.extrapolation` first: how far the predictions can be trusted
* :mod:`~fitting.report.sections.seeds`         the seed spread of repeated experiments
* :mod:`~fitting.report.sections.regime`        converged or compute-limited
* :mod:`~fitting.report.sections.chinchilla`    L(N, D) across weights; Caillaut's L(N, D)
* :mod:`~fitting.report.sections.size_laws`     power law per weight (eq. 6), joint law (eq. 7)
* :mod:`~fitting.report.sections.frontier`      eq. 11 frontier and recommended weights
* :mod:`~fitting.report.sections.heldout`       held-out runs predicted
* :mod:`~fitting.report.sections.design_rounds` an adaptive study's rounds
* :mod:`~fitting.report.sections.mixture`       mixture laws for K pairs (``mnmt-fit mixture``)
* :mod:`~fitting.report.sections.verification`  the verification runs against predicted
* :mod:`~fitting.report.sections.quality`       quality laws (BLEU, ChrF, …) and their frontier
* :mod:`~fitting.report.sections.bivariate`     Ghorbani's encoder/decoder law
* :mod:`~fitting.report.sections.dpl`           Chen's Double Power Law
* :mod:`~fitting.report.sections.curves`        training curves and curve-law continuations
* :mod:`~fitting.report.sections.early_stop`    stopped runs' predicted ends

Each section writes into the document and the :class:`~fitting.report.record.Report`; the writer
(:mod:`fitting.report.writer`) calls them. Sections read the prepared view
(:mod:`fitting.report.view`), never the command line.
"""
