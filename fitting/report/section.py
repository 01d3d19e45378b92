"""A report section as the writer runs it: a ``name`` and ``run(run) → payload``
(:class:`Section`), the state one report's sections share (:class:`SectionRun`), and the
sections registered from outside the package (:func:`register_section`), which the writer runs
after its own. One error boundary is the writer's: a section that raises is listed under
"Skipped" (``fits.json`` ``skipped["section NAME"]``) unless it is ``required``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fitting.report.markdown import Document
from fitting.report.options import ReportOptions
from fitting.report.record import Report
from fitting.report.view import StudyView

__all__ = ["Section", "SectionRun", "ReportSection", "register_section", "unregister_section",
           "registered_sections"]


@dataclass
class SectionRun:
    """What a section reads and writes: its own document ``doc`` (placed by the writer), the
    report record ``rep``, the prepared ``view``, the ``options``, the output folder ``out_dir``
    and the ``payloads`` of the sections run before it, by name."""

    doc: Document
    rep: Report
    view: StudyView
    options: ReportOptions
    out_dir: str
    payloads: dict[str, Any] = field(default_factory=dict)


class Section(Protocol):
    """A report section: its ``name`` (its key in ``payloads`` and under "Skipped") and
    ``run``, which writes into ``run.doc`` and returns its payload."""

    name: str

    def run(self, run: SectionRun) -> Any:
        """Write the section into ``run.doc``; return its payload."""


@dataclass(frozen=True)
class ReportSection:
    """A :class:`Section` from a function. ``json_key``: the ``fits.json`` key of its payload
    (None: not written); ``lead``: its blocks go first, right after the data paragraph;
    ``required``: its failure fails the report instead of being listed under "Skipped"."""

    name: str
    run: Callable[[SectionRun], Any]
    json_key: str | None = None
    lead: bool = False
    required: bool = False


_REGISTERED: dict[str, Section] = {}


def register_section(section: Section) -> Section:
    """Add ``section`` to every report written from now on, after the built-in sections (a
    section of the same name is replaced); returns it."""
    _REGISTERED[section.name] = section
    return section


def unregister_section(name: str) -> None:
    """Remove the registered section ``name`` (nothing when there is none)."""
    _REGISTERED.pop(name, None)


def registered_sections() -> tuple[Section, ...]:
    """The sections registered from outside, in registration order."""
    return tuple(_REGISTERED.values())
