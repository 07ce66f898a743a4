"""The collector's progress line on a stream that is not a terminal (CI logs, `| tee`)."""

from __future__ import annotations

from gym_compose.runs.progress_display import ProgressDisplay


def progress(done: int, finished: bool = False) -> dict:
    return {"total": 8, "done": done, "failed": 0, "rollouts_per_second": 1.0, "mean_reward": 1.0 if done else None,
            "finished": finished}


def test_the_finished_line_is_shown_even_when_its_figures_were_read_but_not_shown_before(capsys):
    """A run shorter than the plain stream's 5 s interval: 0/8 shown, 8/8 read but not shown, then the
    finished 8/8 (same figures) must still be shown (it was skipped as 'unchanged': `up --benchmark
    swebench_mini` ended on '0/8 ... mean reward None' above its metrics)."""
    display = ProgressDisplay()
    display.update(progress(0))
    display.update(progress(8))
    display.update(progress(8, finished=True))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("[....") and " 0/8 " in lines[0]
    assert lines[1].startswith("[####") and " 8/8 " in lines[1] and "mean reward 1.000" in lines[1]


def test_an_unchanged_line_is_not_repeated(capsys):
    display = ProgressDisplay()
    display.update(progress(8, finished=True))
    display.update(progress(8, finished=True))
    assert len(capsys.readouterr().err.splitlines()) == 1
