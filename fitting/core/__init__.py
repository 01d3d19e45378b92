"""The core every law shares: the result object and law registry, the robust least-squares
engine (soft_l1 with an f_scale grid, multi-start, variable projection; Ghorbani App. E) and
uncertainty (Fernandes footnote 5's perturbation refits, bootstrap, prediction bands).

* :mod:`fitting.core.base`        ``FitResult``, ``FitError``, the law registry, ``json_safe``
* :mod:`fitting.core.engine`      ``robust_fit``, ``varpro_fit``, ``VarproModel``, ``VarproOptions``
* :mod:`fitting.core.options`     ``FitOptions``, ``UncertaintyOptions``, ``BacktestOptions``
* :mod:`fitting.core.uncertainty` perturbation and bootstrap samples, summaries, bands
* :mod:`fitting.core.seed_noise`  a seed sd with its seeds, dof and 90 % interval; when it judges
* :mod:`fitting.core.exports`     the lazy re-exports every package of ``fitting`` uses
"""

from __future__ import annotations

from fitting.core.exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(["FitError", "FitResult", "LAW_REGISTRY", "register_law", "get_law",
                     "table_laws", "TableRequest", "json_safe"], "base"),
    **dict.fromkeys(["EngineResult", "VarproModel", "VarproOptions", "robust_fit", "varpro_fit",
                     "goodness_of_fit"], "engine"),
    **dict.fromkeys(["FitOptions", "UncertaintyOptions", "BacktestOptions", "NO_UNCERTAINTY"],
                    "options"),
    **dict.fromkeys(["perturbation_samples", "bootstrap_samples", "summarize_samples",
                     "band_from_samples"], "uncertainty"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
