"""The report's result record: what :func:`fitting.report.writer.write_report` wrote (paths) and
computed (fits, regime, held-out predictions, the sections' payloads, skipped sections)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fitting.laws.size.joint import JointLawFit
from fitting.laws.size.power import PowerLawFit

__all__ = ["Report"]


@dataclass
class Report:
    """What :func:`fitting.report.writer.write_report` produced (paths) and computed (fits, regime,
    held-out predictions (:mod:`fitting.report.sections.heldout`), skipped sections)."""

    out_dir: str
    markdown_path: str
    html_path: str
    json_path: str
    figures: dict[str, str] = field(default_factory=dict)
    power_fits: dict[str, dict[float, PowerLawFit]] = field(default_factory=dict)
    joint: JointLawFit | None = None
    effective: Any = None
    frontier: Any = None
    recommendation: Any = None
    quality: dict = field(default_factory=dict)
    regime: dict = field(default_factory=dict)
    heldout: list[dict] = field(default_factory=list)
    # pair -> weight p -> (f(p), sd over perturbation refits): eq. 10 from the joint law's β
    fraction: dict = field(default_factory=dict)
    # the other papers' sections (JSON-ready dicts; empty when a section did not apply)
    dpl: dict = field(default_factory=dict)
    chinchilla: dict = field(default_factory=dict)
    bivariate: dict = field(default_factory=dict)
    seeds: dict = field(default_factory=dict)
    # the first section: backtests against the seed noise (fitting.report.sections.extrapolation)
    extrapolation: dict = field(default_factory=dict)
    # form -> fitted mixture law (fitting.report.sections.mixture), for the verification section
    mixture_laws: dict = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    markdown: str = ""
