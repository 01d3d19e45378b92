"""A small document model rendered to Markdown and HTML, and the number format of the reports.

Used by :mod:`fitting.report.writer` and :mod:`fitting.report.sections.frontier`: a report is built block by
block (:class:`Document`), then written once as ``report.md`` and once as ``report.html``.
Numbers in tables go through :func:`format_number` ("–" for missing or non-finite values, "± sd"
when a standard deviation is known, "(undetermined: sd …)" when that sd exceeds ten times
max(|value|, 1): :func:`is_undetermined`).
"""

from __future__ import annotations

import html
import math

__all__ = ["Document", "format_number", "is_undetermined", "UNDETERMINED_FACTOR"]


class Document:
    """An ordered list of blocks (heading, paragraph, list, table, image) with two renderers."""

    def __init__(self) -> None:
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str) -> None:
        """A heading of ``level`` (1 = title)."""
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        """A paragraph (Markdown ``**bold**`` is kept in .md and stripped in HTML)."""
        self.blocks.append(("p", text))

    def ul(self, items: list[str]) -> None:
        """A bulleted list; nothing is added when ``items`` is empty."""
        if items:
            self.blocks.append(("ul", items))

    def table(self, header: list[str], rows: list[list[str]]) -> None:
        """A table of already formatted cells; nothing is added when ``rows`` is empty."""
        if rows:
            self.blocks.append(("table", header, rows))

    def img(self, path: str, caption: str) -> None:
        """An image (path relative to the document) with its caption."""
        self.blocks.append(("img", path, caption))

    def markdown(self) -> str:
        """The document as Markdown (blocks separated by blank lines, trailing newline)."""
        out: list[str] = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "ul":
                out.append("\n".join(f"- {i}" for i in b[1]))
            elif b[0] == "table":
                out.append("| " + " | ".join(b[1]) + " |")
                out[-1] += "\n|" + "---|" * len(b[1])
                out[-1] += "".join("\n| " + " | ".join(r) + " |" for r in b[2])
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})\n\n*{b[2]}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        """The document as one self-contained HTML page titled ``title``."""
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>",
               "<style>body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
               "table{border-collapse:collapse;font-size:90%}td,th{border:1px solid #ccc;"
               "padding:2px 6px;text-align:right}img{max-width:100%}figcaption{color:#555}"
               "</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1]).replace('**', '')}</p>")
            elif b[0] == "ul":
                out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b[1]) + "</ul>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in b[1]) + "</tr>")
                out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in b[2]]
                out.append("</table>")
            elif b[0] == "img":
                out.append(f"<figure><img src='{e(b[1])}'><figcaption>{e(b[2])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out)


#: an estimate whose sd exceeds this many times max(|value|, 1) is shown as undetermined
UNDETERMINED_FACTOR = 10.0


def is_undetermined(v: float, sd: float | None) -> bool:
    """Whether the data leave ``v`` undetermined: its finite ``sd`` exceeds
    :data:`UNDETERMINED_FACTOR` × max(|v|, 1).

    Relative for |v| ≥ 1: a scale coefficient (β, A, B, c) free to span decades whose sd is ten
    times its value (β = 4.8e+05 ± 1.9e+17) is not measured at all. Absolute below 1: the
    report's small quantities — fractions f(p), weights, exponents, excesses f(p) − p, R² — are of
    order one by nature, and near 0 an sd larger than the value (f(p) = 0.018 ± 0.048) still
    pins them to ± 0.05; they are flagged only when their sd exceeds 10.
    """
    return sd is not None and math.isfinite(sd) and sd > UNDETERMINED_FACTOR * max(abs(v), 1.0)


def format_number(v: float | None, sd: float | None = None, digits: int = 4) -> str:
    """``v`` with ``digits`` significant digits, plus ``± sd`` (2 digits) when ``sd`` is finite.

    ``None`` and non-finite floats print as "–". An estimate the data leave undetermined
    (:func:`is_undetermined`) prints as "4.8e+05 (undetermined: sd 1.9e+17)": two digits of the
    value, and its sd named, not a "±" that reads as a measurement.
    """
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if is_undetermined(v, sd):
        return f"{v:.{min(digits, 2)}g} (undetermined: sd {sd:.2g})"
    s = f"{v:.{digits}g}"
    if sd is not None and math.isfinite(sd):
        s += f" ± {sd:.2g}"
    return s
