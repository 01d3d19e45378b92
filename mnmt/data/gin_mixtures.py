"""Gin-configured tasks and mixtures (T5X style: a module whose import registers them).

A gin file imports this module (so the configurables exist when it is parsed), binds
``mnmt.data.configured_mixtures.mixtures`` to a list of scoped ``@…/mnmt.data.mixture()``
references, and names :mod:`mnmt.data.gin_register` in ``setup_tasks.modules``
(``MIXTURE_OR_TASK_MODULE``): importing that module after parsing — or calling
:func:`register_configured_mixtures` — registers the synthetic tasks and each mixture.
See ``t5x_configs/data/*.gin``::

    import mnmt.data.gin_mixtures
    setup_tasks.modules = ['mnmt.data.gin_register']
    mnmt.data.configured_mixtures.mixtures = [@chen_t5/mnmt.data.mixture()]
    chen_t5/mnmt.data.mixture.name = 'chen4_t5'
    chen_t5/mnmt.data.mixture.preset = 'tiny:en-{fr,de,zh,hi}'
    chen_t5/mnmt.data.mixture.vocabulary_path = %VOCABULARY_PATH
    chen_t5/mnmt.data.mixture.temperature = 5
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gin

__all__ = ["mixture", "configured_mixtures", "register_configured_mixtures"]


@gin.configurable("mixture", module="mnmt.data")
def mixture(
    name: str = gin.REQUIRED,
    preset: str = gin.REQUIRED,
    vocabulary_path: str = gin.REQUIRED,
    weights: Mapping[str, float] | None = None,
    p: float | None = None,
    temperature: float | None = None,
    oversampling: float | None = None,
    groups: Mapping[str, str] | None = None,
    caps: Mapping[str, int] | int | None = None,
    seed: int = 0,
) -> str:
    """Register the synthetic tasks of ``preset`` and one mixture of them → mixture name.

    Exactly one of ``weights`` (pair → weight; pairs left out get 0 and are only evaluated),
    ``p`` (two-pair presets: weight p of the first pair, 1 − p of the second), ``temperature`` (Chen §4.2, over the pairs' D_i) or ``oversampling`` (Caillaut §3.1, with
    optional pair → domain ``groups``) must be given.
    """
    from mnmt.data import mixtures, tasks

    chosen = [k for k, v in (("weights", weights), ("p", p), ("temperature", temperature),
                             ("oversampling", oversampling)) if v is not None]
    if len(chosen) != 1:
        raise ValueError(
            f"mnmt.data.mixture {name!r}: give exactly one of weights / p / temperature / "
            f"oversampling (got {chosen or 'none'})"
        )
    names = tasks.register_synthetic_tasks(preset, vocabulary_path, seed=seed, caps=caps)
    if p is not None:
        if len(names) != 2:
            raise ValueError(f"mnmt.data.mixture {name!r}: p needs a two-pair preset; "
                             f"{preset!r} has {sorted(names)} (use weights=)")
        first, second = names
        weights = {first: float(p), second: 1.0 - float(p)}
    if weights is not None:
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ValueError(f"mnmt.data.mixture {name!r}: unknown pairs {unknown}; "
                             f"preset {preset!r} has {sorted(names)}")
        return mixtures.register_weighted_mixture(
            name, {names[p]: float(weights.get(p, 0.0)) for p in names}
        )
    ordered = [names[p] for p in names]
    if temperature is not None:
        return mixtures.register_temperature_mixture(name, ordered, temperature)
    by_task = {names[p]: g for p, g in groups.items()} if groups else None
    return mixtures.register_oversampling_mixture(name, ordered, oversampling, groups=by_task)


@gin.configurable("configured_mixtures", module="mnmt.data")
def configured_mixtures(mixtures: Sequence[Any] = ()) -> list[str]:
    """The mixtures bound in gin (each ``@scope/mnmt.data.mixture()`` registers on evaluation)."""
    return [str(m) for m in mixtures]


def register_configured_mixtures() -> list[str]:
    """Register every mixture bound in the gin config; returns their names."""
    return configured_mixtures()

