"""Charts: what a release or an audit draws (a ``Chart``, public values only) and how it is rendered as PNG.

Importing matplotlib is about half a second of a small release's command. ``ahead()`` starts a process
that imports it at once, while the release reads its data and runs on the other core; the block's charts
are then drawn there (the same PNG bytes as in process).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

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


_renderer: ContextVar[Connection | None] = ContextVar("privrelease_chart_renderer", default=None)


def render_chart(chart: Chart, path: Path) -> None:
    """Grouped bars, step lines or side-by-side scatter plots, written as PNG (one chart at a time)."""
    with drawing([(chart, path)]):
        pass


@contextmanager
def drawing(jobs: Iterable[tuple[Chart, Path]]) -> Iterator[None]:
    """Draw these charts while the block runs: in the process ``ahead()`` started, within its block (else in this
    one, before the block). When the block ends every chart is written, or the first failure is raised."""
    jobs = list(jobs)
    conn = _renderer.get()
    if conn is None:
        with RENDERING:
            for chart, path in jobs:
                _render(chart, path)
        yield
        return
    conn.send([(chart, str(path)) for chart, path in jobs])
    try:
        yield
    finally:  # the answers are read, whatever the block did: the next block's answers stay its own
        answers = conn.recv()
    failed = [(chart, answer) for (chart, _), answer in zip(jobs, answers, strict=True) if answer is not None]
    if failed:
        raise RuntimeError(f"drawing the chart {failed[0][0].filename!r} failed: {failed[0][1]}")


@contextmanager
def ahead() -> Iterator[None]:
    """Draw this block's charts (``render_chart`` in this thread) in a process forked now, which imports
    matplotlib while the block runs. The fork shares the modules already loaded; it only draws."""
    parent, child = mp.get_context("fork").Pipe()
    process = mp.get_context("fork").Process(target=_serve, args=(child, parent), name="privrelease-charts", daemon=True)
    process.start()
    child.close()
    token = _renderer.set(parent)
    try:
        yield
    finally:
        _renderer.reset(token)
        try:
            parent.send(None)
        except OSError:
            pass  # it is gone already
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
        parent.close()


def _serve(conn: Connection, theirs: Connection) -> None:
    """The drawing process: matplotlib first, then each batch of charts it is sent, answering None or the error
    for each. It closes its copy of the other end, so that it ends when the release's process does, however
    that ends."""
    theirs.close()
    _pyplot()
    while True:
        try:
            jobs = conn.recv()
        except EOFError:  # the release's process is gone
            return
        if jobs is None:
            return
        conn.send(_draw_all(jobs))


def _draw_all(jobs: list[tuple[Chart, str]]) -> list[str | None]:
    """Each chart drawn, all at once: the first here, the others in children forked from this process (matplotlib
    loaded, no threads), on the other core while the release waits for them. None, or what failed, for each."""
    children = []
    for chart, path in jobs[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: draw, say how it went, and end without the parent's exit handlers
            os.close(read)
            os.write(write, (_draw(chart, path) or "").encode())
            os._exit(0)
        os.close(write)
        children.append((pid, read))
    answers = [_draw(*jobs[0])] if jobs else []
    for pid, read in children:
        with os.fdopen(read, "rb") as said:
            failure = said.read().decode(errors="replace")
        status = os.waitpid(pid, 0)[1]
        answers.append(failure or (None if status == 0 else f"its drawing process ended with status {status}"))
    return answers


def _draw(chart: Chart, path: str) -> str | None:
    try:
        _render(chart, Path(path))
    except Exception as exc:  # noqa: BLE001 - any failure to draw: the release's process raises it
        return f"{type(exc).__name__}: {exc}"
    return None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _render(chart: Chart, path: Path) -> None:
    import numpy as np

    plt = _pyplot()

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
