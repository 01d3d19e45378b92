"""Common result type, law registry and error type shared by every law in `fitting`.

Every fitted law is a :class:`FitResult` subclass registered under a short name
(``"power"``, ``"joint"``, ``"chinchilla"``, ``"dpl"``, ...) with :func:`register_law`, so that
``FitResult.from_json(d)`` can rebuild the right object from ``d["law"]``. That one registration
is also what ``mnmt-fit fit --law`` offers and calls: a registered class that implements
:meth:`FitResult.fit_table` (fitted from a table for a :class:`TableRequest`) is one of its
choices (:func:`table_laws`).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fitting.core.options import DEFAULT_UNCERTAINTY, grouped_options, uncertainty_method

__all__ = ["FitError", "FitResult", "LAW_REGISTRY", "register_law", "get_law", "table_laws",
           "TableRequest", "json_safe", "fitted_pair"]

LAW_REGISTRY: dict[str, type[FitResult]] = {}


class FitError(ValueError):
    """Bad input or a failed fit.

    The message names the offending column and row (or file and line) and what was expected.
    The structured fields are kept for programmatic use.
    """

    def __init__(
        self,
        message: str,
        *,
        column: str | None = None,
        row: Any = None,
        source: str | None = None,
    ) -> None:
        super().__init__(message)
        self.column = column
        self.row = row
        self.source = source


def register_law(name: str) -> Callable[[type[FitResult]], type[FitResult]]:
    """Class decorator: register a FitResult subclass under ``name`` (and set ``cls.LAW``)."""

    def deco(cls: type[FitResult]) -> type[FitResult]:
        if name in LAW_REGISTRY and LAW_REGISTRY[name] is not cls:
            existing = LAW_REGISTRY[name]
            # Re-registration of the same class (module reload) is fine; a clash is not.
            if f"{existing.__module__}.{existing.__qualname__}" != f"{cls.__module__}.{cls.__qualname__}":
                raise ValueError(f"law {name!r} already registered by {existing.__qualname__}")
        cls.LAW = name
        LAW_REGISTRY[name] = cls
        return cls

    return deco


def get_law(name: str) -> type[FitResult]:
    """The registered FitResult subclass for ``name`` (FitError listing known laws otherwise)."""
    _import_builtin_laws()
    try:
        return LAW_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(LAW_REGISTRY)) or "none"
        raise FitError(f"unknown law {name!r}; registered laws: {known}") from None


def table_laws() -> list[str]:
    """The laws ``mnmt-fit fit --law`` offers: every registered law whose class implements
    :meth:`FitResult.fit_table`, sorted by name."""
    _import_builtin_laws()
    return sorted(name for name, cls in LAW_REGISTRY.items()
                  if cls.fit_table.__func__ is not FitResult.fit_table.__func__)


@dataclass(frozen=True)
class TableRequest:
    """What ``mnmt-fit fit`` asks of a law's :meth:`FitResult.fit_table`: the table's
    ``source`` (for messages), the ``eval_set`` and ``metric`` of a tidy table, ``drop_invalid``,
    the ``pair``, ``weight``, ``form`` and ``quality_metric`` options, the fit options as given
    (``uncertainty``, ``n_refits``, ``f_scale`` — ``"auto"`` or a number — and ``seed``) and the
    law's own keyword ``options`` (``--option KEY=VALUE``)."""

    source: str
    eval_set: str = "validation"
    metric: str = "loss"
    drop_invalid: bool = False
    pair: str | None = None
    weight: float | None = None
    form: str | None = None
    quality_metric: str = "bleu"
    uncertainty: str = DEFAULT_UNCERTAINTY.method or "none"
    n_refits: int = DEFAULT_UNCERTAINTY.n_refits
    f_scale: str | float = "auto"
    seed: int = DEFAULT_UNCERTAINTY.seed
    options: dict[str, Any] = field(default_factory=dict)

    def fit_options(self) -> dict[str, Any]:
        """Keyword arguments of the least-squares laws' fits: ``f_scale`` (``auto`` or a number),
        ``uncertainty`` (``none`` → None), ``n_refits``, ``seed`` and the ``--option`` values,
        grouped into their options objects (:func:`fitting.core.options.grouped_options`)."""
        fs: Any = self.f_scale
        if fs != "auto":
            try:
                fs = float(fs)
            except ValueError:
                raise FitError(f"--f-scale must be 'auto' or a number, got {fs!r}") from None
        return grouped_options({"f_scale": fs, "uncertainty": uncertainty_method(self.uncertainty), "n_refits": self.n_refits,
                                "seed": self.seed, **self.options})

    def bootstrap_options(self) -> dict[str, Any]:
        """Options of the laws whose only uncertainty is the bootstrap (Chinchilla, DPL): an
        ``uncertainty`` other than ``none`` asks for ``n_refits`` resamples (rows resampled with
        replacement); ``seed`` and ``drop_invalid`` are passed on."""
        kw: dict[str, Any] = {"seed": self.seed, "drop_invalid": self.drop_invalid}
        if self.uncertainty != "none" and self.n_refits > 0:
            kw["bootstrap"] = self.n_refits
        return kw


def _import_builtin_laws() -> None:
    """Import the law modules so that their classes are registered (lazy, best effort).

    By module name, on first use: the law modules import this one (``register_law``), and the
    registry is filled as they load.
    """
    for mod in (
        "fitting.laws.size.power",
        "fitting.laws.size.joint",
        "fitting.laws.size.effective",
        "fitting.laws.size.bivariate",
        "fitting.laws.quality",
        "fitting.laws.curves.learning_curve",
        "fitting.laws.budget.chinchilla",
        "fitting.laws.mixture.dpl",
    ):
        try:
            importlib.import_module(mod)
        except ImportError:
            pass


def json_safe(x: Any) -> Any:
    """Recursively convert numpy scalars/arrays, tuples and non-finite floats to JSON-safe values.

    Non-finite floats become ``None`` (strict JSON has no NaN/inf); :func:`_from_json_value`
    turns ``None`` back into NaN where a float is expected.
    """
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_safe(v) for v in x]
    if isinstance(x, np.ndarray):
        return [json_safe(v) for v in x.tolist()]
    if isinstance(x, np.bool_ | bool):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating | float):
        v = float(x)
        return v if math.isfinite(v) else None
    return x


def _floats(d: dict | None) -> dict[str, float] | None:
    if d is None:
        return None
    return {k: (math.nan if v is None else float(v)) for k, v in d.items()}


def fitted_pair(pairs: list[str] | None, pair: str | None, *, name_one: bool = False) -> str:
    """``pair`` when it is one of the fitted ``pairs`` (None: the only fitted pair); else a
    FitError naming the fitted pairs. ``name_one``: None where not exactly one pair was fitted
    says so ("several pairs were fitted (…); name one") rather than that None was not fitted."""
    pairs = pairs or []
    if pair is None and len(pairs) == 1:
        return pairs[0]
    if pair is None and name_one:
        raise FitError(f"several pairs were fitted ({pairs}); name one", column="pair")
    if pair not in pairs:
        raise FitError(f"pair {pair!r} was not fitted; fitted pairs: {pairs}", column="pair")
    return pair


@dataclass
class FitResult:
    """A fitted law: named parameters, their uncertainty, goodness of fit, warnings.

    Subclasses (one per law) add law-specific fields (with defaults) and implement
    :meth:`predict`. ``to_json``/``from_json`` round-trip any subclass through the registry.
    What every robust least-squares fit records is read through typed attributes
    (:attr:`converged`, :attr:`f_scale`); ``meta`` keeps the law-specific extras, and
    ``fits.json`` keeps both where it always had them.
    """

    law: str
    params: dict[str, float]
    stderr: dict[str, float] | None = None
    intervals: dict[str, tuple[float, float]] | None = None
    goodness: dict[str, float] = field(default_factory=dict)
    n_points: int = 0
    warnings: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    LAW: ClassVar[str] = ""
    _BASE_FIELDS: ClassVar[tuple[str, ...]] = (
        "law", "params", "stderr", "intervals", "goodness", "n_points", "warnings", "meta",
    )

    # -- behaviour -----------------------------------------------------------------------
    def predict(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Law-specific prediction; implemented by each subclass."""
        raise NotImplementedError(f"{type(self).__name__} does not implement predict()")

    @property
    def converged(self) -> bool | dict[str, bool] | None:
        """Whether the robust polish converged (:func:`fitting.core.engine.converged`; False
        comes with a warning, the parameters being the optimiser's last iterate): one flag, or
        one per pair for a law fitted pair by pair; None for a law that does not record it."""
        return self.meta.get("converged")

    @property
    def f_scale(self) -> float | dict[str, float] | None:
        """The soft_l1 scale of the residuals the fit used (Ghorbani et al. App. E; the grid's
        choice where ``"auto"`` was asked for): one number, or one per pair for a law fitted
        pair by pair; None for a law without one."""
        value = self.meta.get("f_scale")
        return self.goodness.get("f_scale") if value is None else value

    @classmethod
    def fit_table(cls, table: Any, request: TableRequest) -> FitResult | dict[str, Any]:
        """The law fitted to ``table`` (a DataFrame, columns mapped) as ``request`` asks: what
        ``mnmt-fit fit --law NAME`` calls. A law implements it to be one of that command's
        choices; a dict holds one fit (or ``{"error": message}``) per group of the table."""
        raise NotImplementedError(f"{cls.__name__} cannot be fitted to a table")

    def __getitem__(self, name: str) -> float:
        """Shorthand for ``self.params[name]``."""
        return self.params[name]

    def summary(self) -> str:
        """A short human-readable table: parameter, value, stderr, interval; then goodness."""
        lines = [f"law: {self.law}   points: {self.n_points}"]
        for k, v in self.params.items():
            s = f"  {k:>14s} = {v:.6g}"
            if self.stderr and k in self.stderr and math.isfinite(self.stderr[k]):
                s += f" ± {self.stderr[k]:.3g}"
            if self.intervals and k in self.intervals:
                lo, hi = self.intervals[k]
                s += f"   [{lo:.6g}, {hi:.6g}]"
            lines.append(s)
        if self.goodness:
            lines.append("  fit: " + ", ".join(f"{k}={v:.4g}" for k, v in self.goodness.items()))
        for w in self.warnings:
            lines.append(f"  WARNING: {w}")
        return "\n".join(lines)

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict:
        """A JSON-safe dict including ``"law"``; subclass fields are included as well."""
        out: dict[str, Any] = {
            "law": self.law,
            "params": json_safe(self.params),
            "stderr": json_safe(self.stderr),
            "intervals": json_safe(self.intervals),
            "goodness": json_safe(self.goodness),
            "n_points": int(self.n_points),
            "warnings": list(self.warnings),
            "meta": json_safe(self.meta),
        }
        for f in dataclasses.fields(self):
            if f.name not in self._BASE_FIELDS:
                out[f.name] = self._encode_extra(f.name, getattr(self, f.name))
        return out

    def _encode_extra(self, name: str, value: Any) -> Any:
        """Encode a subclass field for JSON (override for nested FitResults etc.)."""
        if isinstance(value, FitResult):
            return value.to_json()
        return json_safe(value)

    @classmethod
    def _decode_extra(cls, name: str, value: Any) -> Any:
        """Decode a subclass field from JSON (override to rebuild arrays etc.)."""
        return value

    @classmethod
    def from_json(cls, d: dict) -> FitResult:
        """Rebuild a result from :meth:`to_json` output, dispatching on ``d["law"]``."""
        if not isinstance(d, dict) or "law" not in d:
            raise FitError("fit JSON must be an object with a 'law' field", column="law")
        target = get_law(d["law"])
        if cls is not FitResult and not issubclass(target, cls):
            raise FitError(f"JSON holds law {d['law']!r}, not a {cls.__name__}", column="law")
        intervals = d.get("intervals")
        if intervals is not None:
            intervals = {
                k: (
                    math.nan if v[0] is None else float(v[0]),
                    math.nan if v[1] is None else float(v[1]),
                )
                for k, v in intervals.items()
            }
        kwargs: dict[str, Any] = {
            "law": d["law"],
            "params": _floats(d.get("params") or {}),
            "stderr": _floats(d.get("stderr")),
            "intervals": intervals,
            "goodness": _floats(d.get("goodness") or {}),
            "n_points": int(d.get("n_points", 0)),
            "warnings": list(d.get("warnings") or []),
            "meta": dict(d.get("meta") or {}),
        }
        for f in dataclasses.fields(target):
            if f.name not in cls._BASE_FIELDS and f.name in d:
                kwargs[f.name] = target._decode_extra(f.name, d[f.name])
        return target(**kwargs)
