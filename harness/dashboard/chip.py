"""One chip of the matrix as HTML, built in Python: the page draws 10,000 of them, and a Jinja macro call per
chip was two thirds of the page's time. Every stored string goes through ``markupsafe.escape`` exactly as the
template's autoescape would; the live stream sends the same HTML for a changed chip."""

from __future__ import annotations

from markupsafe import Markup, escape

from harness.dashboard.context import GRADE_CLASS, Links, duration
from harness.dashboard.matrix import Chip

__all__ = ["chip_markup", "chips_markup"]


def chip_markup(chip: Chip, sweep_id: str, links: Links) -> Markup:
    cell, text, took = escape(chip.cell), escape(chip.text), escape(duration(chip.duration_s))
    href = links.cell(sweep_id, chip.cell)
    classes = "chip " + GRADE_CLASS.get(chip.grade or "", "g-none") + (" running" if chip.running else "") + (
        " regressed" if chip.regressed else "")
    title = f"{cell}: {text}"
    if chip.automatic:
        title += f" (override of {escape(chip.automatic)})"
    if chip.stop:
        title += f"; stop {escape(chip.stop)}"
    title += f"; {chip.attempts} attempt(s); {took}"
    parts = [
        f'<a class="{classes}" id="cell-{cell}" data-cell="{cell}" data-host="{escape(chip.host)}" '
        f'data-item="{escape(chip.item)}" data-agent="{escape(chip.agent)}" data-grade="{escape(chip.grade or "none")}"'
        + (f' href="{escape(href)}"' if href else "") + f' title="{title}">\n',
        f'<span class="agent">{escape(chip.agent)}{f" r{chip.rep}" if chip.rep > 1 else ""}</span>\n',
        f'<span class="grade">{text}{"*" if chip.automatic else ""}</span>\n',
    ]
    if chip.stop:
        parts.append(f'<span class="badge stop">{escape(chip.stop)}</span>\n')
    if chip.regressed:
        parts.append('<span class="badge regressed-badge">regressed</span>\n')
    parts.append(f'<span class="meta">{took}{f" · {chip.attempts} attempts" if chip.attempts > 1 else ""}</span>\n</a>')
    return Markup("".join(parts))


def chips_markup(chips: list[Chip], sweep_id: str, links: Links) -> Markup:
    """A matrix cell's chips (its agents and repetitions), one after the other."""
    return Markup("".join(chip_markup(c, sweep_id, links) for c in chips))
