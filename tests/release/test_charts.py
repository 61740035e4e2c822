"""Charts drawn ahead: in a process forked at the start of a release, which imports matplotlib while the
release runs. The PNGs are the bytes drawn in process; a failure is raised in the release's process; and
the release's process never imports matplotlib (the half second it saves)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from privrelease.core import charts
from privrelease.core.charts import Chart, ahead, drawing, render_chart
from tests.conftest import REPO

CHARTS = [
    Chart(
        "bars.png",
        "counts",
        ["a", "b", "c"],
        {"released": [3.0, 1.0, 2.0], "true": [2.0, 1.0, 3.0]},
        intervals=[(2, 4), (0, 2), (1, 3)],
    ),
    Chart("curve.png", "detection", [], {}, kind="curve", axes=("users", "p"), points={"w": ([1, 10, 100], [0.0, 0.5, 1.0])}),
    Chart("scatter.png", "rank", [], {}, kind="scatter", points={"a": (np.arange(50), np.arange(50) ** 0.5)}),
]


def test_charts_drawn_ahead_are_the_charts_drawn_in_process(tmp_path: Path):
    for chart in CHARTS:
        render_chart(chart, tmp_path / f"here-{chart.filename}")
    with ahead():
        for chart in CHARTS:
            render_chart(chart, tmp_path / f"ahead-{chart.filename}")
    for chart in CHARTS:
        assert (tmp_path / f"ahead-{chart.filename}").read_bytes() == (tmp_path / f"here-{chart.filename}").read_bytes()


def test_a_chart_that_cannot_be_drawn_fails_the_release_process(tmp_path: Path):
    broken = Chart("broken.png", "t", ["a", "b"], {"s": [1.0, 2.0, 3.0]})  # three bars for two labels
    with pytest.raises(RuntimeError, match="drawing the chart 'broken.png' failed: ValueError"), ahead():
        render_chart(broken, tmp_path / "broken.png")
    render_chart(CHARTS[0], tmp_path / "after.png")  # the block is over: in process again
    assert (tmp_path / "after.png").stat().st_size > 1000


def test_charts_drawn_while_a_block_runs_are_all_written_when_it_ends(tmp_path: Path):
    """A release sends its charts, writes its data files while they are drawn, and digests them after the block:
    every chart is there then, a failed one is raised after its fellows are written, and a block that fails
    still reads its charts' answers, so that the next chart's answer is its own."""
    broken = Chart("broken.png", "t", ["a", "b"], {"s": [1.0, 2.0, 3.0]})
    with ahead():
        with (
            pytest.raises(RuntimeError, match="'broken.png' failed"),
            drawing([(CHARTS[0], tmp_path / "a.png"), (broken, tmp_path / "b.png"), (CHARTS[1], tmp_path / "c.png")]),
        ):
            pass
        assert (tmp_path / "a.png").stat().st_size > 1000 and (tmp_path / "c.png").stat().st_size > 1000
        with pytest.raises(KeyError), drawing([(CHARTS[2], tmp_path / "d.png")]):
            raise KeyError("the block failed")
        render_chart(CHARTS[0], tmp_path / "e.png")
        assert (tmp_path / "e.png").read_bytes() == (tmp_path / "a.png").read_bytes()


def test_charts_started_early_are_taken_not_drawn_again(tmp_path: Path):
    """A mechanism's charts are sent when it returns them (``charts.start``, while its output is checked); the
    publication's ``drawing`` takes their PNGs (the bytes drawn in process) and sends only the others; a broken
    one started early is raised there, after its fellows are written; the block's temporary PNGs go with it."""
    for chart in CHARTS:
        render_chart(chart, tmp_path / f"here-{chart.filename}")
    broken = Chart("broken.png", "t", ["a", "b"], {"s": [1.0, 2.0, 3.0]})
    with ahead():
        drawer = charts._renderer.get()
        charts.start(CHARTS[:2])
        charts.start([CHARTS[0], broken])  # one already sent is not sent again
        assert drawer.sent == 2 and len(drawer.early) == 3
        with drawing([(chart, tmp_path / f"early-{chart.filename}") for chart in CHARTS]):
            assert drawer.sent == 3  # the third chart alone was sent now
        with pytest.raises(RuntimeError, match="'broken.png' failed: ValueError"), drawing([(broken, tmp_path / "b.png")]):
            pass
        assert drawer.sent == 3 and not (tmp_path / "b.png").exists()
        folder = drawer.folder
        assert folder is not None and len(list(folder.iterdir())) == 2  # the two that could be drawn
    assert not folder.exists()
    for chart in CHARTS:
        assert (tmp_path / f"early-{chart.filename}").read_bytes() == (tmp_path / f"here-{chart.filename}").read_bytes()
    charts.start(CHARTS)  # without a drawing process: nothing to do, drawn in process when asked
    render_chart(CHARTS[1], tmp_path / "after.png")
    assert (tmp_path / "after.png").read_bytes() == (tmp_path / "here-curve.png").read_bytes()


def test_the_release_process_never_imports_matplotlib():
    code = (
        "import sys, tempfile, pathlib\n"
        "from tests.release.test_charts import CHARTS\n"
        "from privrelease.core.charts import ahead, render_chart\n"
        "from contextlib import nullcontext\n"
        "with (ahead() if sys.argv[1] == 'ahead' else nullcontext()), tempfile.TemporaryDirectory() as tmp:\n"
        "    render_chart(CHARTS[0], pathlib.Path(tmp) / 'c.png')\n"
        "    assert (pathlib.Path(tmp) / 'c.png').stat().st_size > 1000\n"
        "print('matplotlib' in sys.modules)\n"
    )
    said = [
        subprocess.run([sys.executable, "-c", code, way], cwd=REPO, capture_output=True, text=True, check=True)
        for way in ("ahead", "here")
    ]
    assert [s.stdout.strip() for s in said] == ["False", "True"]  # drawn in process (the weakened way), it is imported


def orphan(weakened: str, folder: Path) -> int:
    """A release process killed outright inside ``ahead()``, a chart started; returns its drawing process's pid
    (read from a file: a pipe would stay open as long as the drawing process holds it). Its temporary folder is
    ``folder / "tmp"``."""
    code = (
        "import os, signal, sys, types, multiprocessing\n"
        "from privrelease.core import charts\n"
        "chart = charts.Chart('bars.png', 'counts', ['a', 'b'], {'released': [3.0, 1.0]})\n"
        "if sys.argv[1] == 'pipe':  # the drawing process keeps its copy of the release's end of the pipe\n"
        "    serve = charts._serve\n"
        "    charts._serve = lambda conn, theirs, folder: serve(conn, types.SimpleNamespace(close=lambda: None), folder)\n"
        "if sys.argv[1] == 'folder':  # the drawing process leaves the early charts' folder behind\n"
        "    charts._remove = lambda folder: None\n"
        "with charts.ahead():\n"
        "    charts.start([chart])\n"
        "    print(multiprocessing.active_children()[0].pid, flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    tmp = folder / "tmp"
    tmp.mkdir(exist_ok=True)
    out = folder / f"pid-{weakened}"
    with out.open("w") as fh:
        done = subprocess.run(
            [sys.executable, "-c", code, weakened],
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            timeout=120,
            env={**os.environ, "TMPDIR": str(tmp)},
        )
    assert done.returncode == -9
    return int(out.read_text().split()[0])


def alive(pid: int, seconds: float = 30.0) -> bool:
    """Whether the process is still there after ``seconds`` (polled: it may take a moment to end)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.2)
    return True


def test_the_drawing_process_ends_with_a_killed_release(tmp_path: Path):
    assert not alive(orphan("sound", tmp_path))
    stuck = orphan("pipe", tmp_path)
    try:
        assert alive(stuck, seconds=3)  # waiting forever on a pipe it holds open itself
    finally:
        os.kill(stuck, signal.SIGKILL)


def test_a_killed_release_leaves_no_chart_in_the_temporary_folder(tmp_path: Path):
    """The early charts' folder (a chart of a draw that was never published, outside the home) goes with the
    drawing process when the release's own process is killed; left to the release's process (the weakened way),
    it stays, one per killed release."""
    tmp = tmp_path / "tmp"
    assert not alive(orphan("sound", tmp_path))
    assert list(tmp.iterdir()) == []
    assert not alive(orphan("folder", tmp_path))
    (left,) = tmp.iterdir()
    assert left.name.startswith("privrelease-charts-")


def test_a_block_that_asked_for_nothing_does_not_wait_for_the_drawing_process(monkeypatch):
    """A request refused before its release asked for no chart: the drawing process (still importing matplotlib,
    half a second) is killed, not waited for; one that drew is told to end, not killed."""
    processes = []
    real = charts.mp.get_context

    def kept(method):  # the processes ahead() starts, to look at how they ended
        context = real(method)

        class Context:
            Pipe = context.Pipe

            def Process(self, *args, **kwargs):  # multiprocessing's name
                processes.append(context.Process(*args, **kwargs))
                return processes[-1]

        return Context()

    monkeypatch.setattr(charts.mp, "get_context", kept)
    with ahead():
        pass
    with ahead(), drawing([(CHARTS[0], Path("/dev/null"))]):
        pass
    assert processes[0].exitcode == -9  # killed: nothing was asked of it
    assert processes[1].exitcode != -9  # asked and drew: told to end, not killed
