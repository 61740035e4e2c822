"""Artifacts as Prefect's UI renders them: charts inlined, tables of plain cells.

The UI's markdown view resolves a relative image against its own address, where no chart is, but
renders a ``data:`` URI; it never wraps a table cell, so a wide table runs past the view's edge
(a long guarantee line is cut off); its table view prints a nested value as raw JSON. Only files a
release folder (or the audit) publishes are inlined, so an artifact shows nothing they do not.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

IMAGE = re.compile(r"!\[([^\]]*)\]\(([A-Za-z0-9_.-]+\.png)\)")
TABLE = re.compile(r"(?:^\|.*\|[ \t]*\n?)+", re.MULTILINE)
FITS = 90  # characters of a table row that fit the artifact view unwrapped (about 700 px)


def data_uri(png: Path) -> str:
    return f"data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"


def embedded(markdown: str, folder: Path) -> str:
    """The report with each chart of its folder inlined."""

    def inline(match: re.Match) -> str:
        chart = folder / match.group(2)
        return f"![{match.group(1)}]({data_uri(chart)})" if chart.is_file() else match.group(0)

    return IMAGE.sub(inline, markdown)


def _row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _unwrapped(match: re.Match) -> str:
    """A table too wide for the view as a list: one item per row, each cell named by its column."""
    lines = match.group(0).rstrip("\n").split("\n")
    if len(lines) < 2 or max(map(len, lines)) <= FITS:
        return match.group(0)
    header, rows = _row(lines[0]), [_row(x) for x in lines[2:]]
    items = []
    for row in rows:
        named = [f"{h}: {v}" if h else v for h, v in zip(header[1:], row[1:], strict=False)]
        items.append(f"- **{row[0]}**: " + " · ".join(named) if len(header) > 2 and any(header) else f"- **{row[0]}**: {row[1]}")
    return "\n".join(items) + "\n"


def readable(markdown: str, folder: Path | None = None) -> str:
    """The markdown as the UI shows it whole: charts of ``folder`` inlined, wide tables as lists."""
    return TABLE.sub(_unwrapped, embedded(markdown, folder) if folder is not None else markdown)


def cell(value: object) -> object:
    """A table cell: numbers to 4 significant digits, anything nested as compact text."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return value


PAIRS = ("cap", "spent", "remaining", "gdp")  # {epsilon, delta} figures of a dataset's totals
EPSILONS = ("filter", "pld")  # the accountants' figures: their epsilon at the cap's delta


def flat(row: dict) -> dict:
    """One table row: an {epsilon, delta} pair becomes two columns ("cap epsilon", "cap delta"), whether the row has it
    or not ("-"): the UI takes a table's columns from its first row, so every row has the same (an sdc dataset's row
    first had left the dp rows' figures out)."""
    out: dict = {}
    for key, value in row.items():
        if key in PAIRS or (isinstance(value, dict) and set(value) == {"epsilon", "delta"}):
            out |= {f"{key} {x}": "-" if value is None else cell(value[x]) for x in ("epsilon", "delta")}
        elif key in EPSILONS:
            out[f"{key} epsilon"] = "-" if value is None else cell(value["epsilon"])
        elif key == "next":
            out[key] = "-" if value is None else f"{value['like']} fits {value['fits']} more"
        elif key == "spent_share":
            out["spent share"] = "-" if value is None else f"{100 * value['share']:.3g}% ({value['by']})"
        elif key == "room":
            out["next release like the last"] = "-" if value is None else value["says"]
        else:
            out[key] = "-" if value is None else cell(value)
    return out
