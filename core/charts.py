"""Charts: what a release or an audit draws (a ``Chart``, public values only) and how it is rendered as PNG."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

# matplotlib is not thread-safe (pyplot's figure registry; mathtext's parser, which draws a log axis's
# ticks, fails outright when two threads parse at once): releases in threads of one process render in turn
RENDERING = threading.Lock()


@dataclass(frozen=True)
class Chart:
    """A chart rendered by ``core.release.publish``: grouped bars, or ``points`` as scatter, step lines or curves."""

    filename: str
    title: str
    labels: list[str]
    series: dict[str, list[float]]
    ylabel: str = ""
    kind: str = "bar"
    points: dict = field(default_factory=dict)  # name -> (x array, y array), for "scatter" and "line"
    axes: tuple[str, str] = ("", "")
    intervals: list = field(default_factory=list)  # bar charts: (low, high) per label, drawn on the first series


def render_chart(chart: Chart, path: Path) -> None:
    """Grouped bars, step lines or side-by-side scatter plots, written as PNG (one chart at a time)."""
    with RENDERING:
        _render(chart, path)


def _render(chart: Chart, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if chart.kind in ("line", "curve"):  # step lines, or smooth curves on a log x axis
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, (xs, ys) in chart.points.items():
            if chart.kind == "curve":
                ax.plot(xs, ys, marker="o", label=name)
                ax.set_xscale("log")
            else:
                ax.step(xs, ys, where="post", marker="o", label=name)
        ax.set_title(chart.title, fontsize=10)
        ax.set_xlabel(chart.axes[0])
        ax.set_ylabel(chart.axes[1])
        ax.legend(fontsize=8)
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    if chart.kind == "scatter":
        fig, axes = plt.subplots(1, len(chart.points), figsize=(5 * len(chart.points), 4.5), sharex=True, sharey=True)
        for ax, (name, (xs, ys)) in zip(np.atleast_1d(axes), chart.points.items()):
            ax.scatter(xs, ys, s=2, alpha=0.4)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel(chart.axes[0])
            ax.set_ylabel(chart.axes[1])
        fig.suptitle(chart.title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return
    x = np.arange(len(chart.labels))
    width = 0.8 / max(len(chart.series), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(chart.labels) + 2), 4))
    for i, (name, values) in enumerate(chart.series.items()):
        at = x + (i - (len(chart.series) - 1) / 2) * width
        ax.bar(at, values, width, label=name)
        if i == 0 and chart.intervals:
            low, high = np.array(chart.intervals, dtype=float).T
            ax.errorbar(
                at,
                values,
                yerr=[np.asarray(values) - low, high - np.asarray(values)],
                fmt="none",
                ecolor="black",
                capsize=4,
                label="95% interval",
            )
    ax.set_xticks(x, chart.labels, rotation=30, ha="right")
    ax.set_title(chart.title, fontsize=10)
    ax.set_ylabel(chart.ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
