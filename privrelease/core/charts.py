"""Charts: what a release or an audit draws (a ``Chart``, public values only) and how it is rendered as PNG.

Importing matplotlib is about half a second of a small release's command. ``ahead()`` starts a process
that imports it at once, while the release reads its data and runs on the other core; the block's charts
are then drawn there (the same PNG bytes as in process). ``start`` sends charts as soon as they are known
(a mechanism's, while its output is checked), and ``drawing`` takes the PNGs they became.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from privrelease.core import parallel

# matplotlib is not thread-safe (pyplot's figure registry; mathtext's parser, which draws a log axis's
# ticks, fails outright when two threads parse at once): releases in threads of one process render in turn
RENDERING = threading.Lock()


@dataclass(frozen=True)
class Chart:
    """A chart rendered by ``privrelease.core.release.publish``: grouped bars, or ``points`` as scatter, step lines or curves."""

    filename: str
    title: str
    labels: list[str]
    series: dict[str, list[float]]
    ylabel: str = ""
    kind: str = "bar"
    points: dict = field(default_factory=dict)  # name -> (x array, y array), for "scatter" and "line"
    axes: tuple[str, str] = ("", "")
    intervals: list = field(default_factory=list)  # bar charts: (low, high) per label, drawn on the first series


class _Drawer:
    """The release's end of the pipe to the drawing process: each batch of charts it sent, answered in turn, and
    the charts ``start`` sent before anyone asked for them (their PNGs in a private temporary folder)."""

    def __init__(self, conn: Connection, folder: Path):
        self.conn, self.sent, self.owed, self.answered = conn, 0, [], {}
        self.early: dict[int, tuple[Chart, int, int, Path]] = {}  # id(chart) -> (it, kept alive; batch, place, PNG)
        self.folder = folder  # the early charts' PNGs: removed when the block ends, and by the drawing process as it ends

    def send(self, jobs: list[tuple[Chart, Path]]) -> int:
        self.conn.send([(chart, str(path)) for chart, path in jobs])
        self.sent += 1
        self.owed.append(self.sent)
        return self.sent

    def answers(self, batch: int) -> list[str | None]:
        """The answers to ``batch``, reading the pipe's earlier answers on the way (they stay for their askers)."""
        while batch not in self.answered:
            self.answered[self.owed.pop(0)] = self.conn.recv()
        return self.answered[batch]


_renderer: ContextVar[_Drawer | None] = ContextVar("privrelease_chart_renderer", default=None)


def render_chart(chart: Chart, path: Path) -> None:
    """Grouped bars, step lines or side-by-side scatter plots, written as PNG (one chart at a time)."""
    with drawing([(chart, path)]):
        pass


def start(charts: Iterable[Chart]) -> None:
    """Begin drawing ``charts`` now in the process ``ahead()`` started (nothing to do without one); a later
    ``drawing`` of one of these very charts takes its PNG instead of drawing it again. Charts hold public values
    only: one started for a release that then fails is simply not used (its folder goes with the block)."""
    drawer = _renderer.get()
    charts = [c for c in charts if drawer is not None and id(c) not in drawer.early]
    if not charts:
        return
    pngs = [drawer.folder / f"{drawer.sent + 1}-{i}.png" for i in range(len(charts))]
    batch = drawer.send(list(zip(charts, pngs)))
    drawer.early |= {id(c): (c, batch, i, png) for i, (c, png) in enumerate(zip(charts, pngs))}


@contextmanager
def drawing(jobs: Iterable[tuple[Chart, Path]]) -> Iterator[None]:
    """Draw these charts while the block runs: in the process ``ahead()`` started, within its block (else in this
    one, before the block); a chart ``start`` sent is not drawn again. When the block ends every chart is written,
    or the first failure is raised."""
    jobs = list(jobs)
    drawer = _renderer.get()
    if drawer is None:
        with RENDERING:
            for chart, path in jobs:
                _render(chart, path)
        yield
        return
    early = [(chart, path) for chart, path in jobs if id(chart) in drawer.early]
    late = [(chart, path) for chart, path in jobs if id(chart) not in drawer.early]
    batch = drawer.send(late) if late else None
    try:
        yield
    finally:  # the answers are read, whatever the block did: the next block's answers stay its own
        answers = dict(zip((id(c) for c, _ in late), drawer.answers(batch))) if batch is not None else {}
        for chart, path in early:
            _, sent, place, png = drawer.early[id(chart)]
            answers[id(chart)] = drawer.answers(sent)[place]
            if answers[id(chart)] is None:
                shutil.copyfile(png, path)
    failed = [(chart, answers[id(chart)]) for chart, _ in jobs if answers[id(chart)] is not None]
    if failed:
        raise RuntimeError(f"drawing the chart {failed[0][0].filename!r} failed: {failed[0][1]}")


@contextmanager
def ahead() -> Iterator[None]:
    """Draw this block's charts (``render_chart`` in this thread) in a process forked now, which imports
    matplotlib while the block runs. The fork shares the modules already loaded; it only draws. A block that
    asked it for nothing does not wait for it. The early charts' folder goes when the block ends, or with the
    drawing process when the release's own process is killed (it would stay behind in the temporary folder,
    one chart per killed release, outside the home and its retention)."""
    folder = Path(tempfile.mkdtemp(prefix="privrelease-charts-"))  # mode 700
    parent, child = mp.get_context("fork").Pipe()
    process = mp.get_context("fork").Process(target=_serve, args=(child, parent, folder), name="privrelease-charts", daemon=True)
    process.start()
    child.close()
    drawer = _Drawer(parent, folder)
    token = _renderer.set(drawer)
    try:
        yield
    finally:
        _renderer.reset(token)
        if drawer.sent == 0:  # nothing was asked of it (a request refused before its release): not waited for
            process.kill()
        try:
            parent.send(None)
        except OSError:
            pass  # it is gone already
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
        parent.close()
        _remove(folder)


def _serve(conn: Connection, theirs: Connection, folder: Path) -> None:
    """The drawing process: matplotlib first, then each batch of charts it is sent, answering None or the error
    for each. It closes its copy of the other end, so that it ends when the release's process does, however
    that ends, and removes the early charts' folder as it ends."""
    theirs.close()
    try:
        _pyplot()
        while True:
            try:
                jobs = conn.recv()
            except EOFError:  # the release's process is gone
                return
            if jobs is None:
                return
            answers = _draw_all(jobs)
            try:
                conn.send(answers)
            except OSError:  # the release's process is gone (killed while these were drawn)
                return
    finally:
        _remove(folder)


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _draw_all(jobs: list[tuple[Chart, str]]) -> list[str | None]:
    """Each chart drawn, all at once: the first here, the others in children forked from this process (matplotlib
    loaded, no threads), on the other core while the release waits for them. None, or what failed, for each."""
    drawn = parallel.forked(lambda job: (_draw(*job) or "").encode(), jobs)
    return [
        said.decode(errors="replace") or (None if status == 0 else f"its drawing process ended with status {status}")
        for said, status in drawn
    ]


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
