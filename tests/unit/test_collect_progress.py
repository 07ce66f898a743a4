"""progress.json under bursts: counts that come within MIN_INTERVAL_S of the last write reach the
file once the interval is over, even when nothing follows them (a run then waiting on a held model
used to show its first count for good)."""

from __future__ import annotations

import asyncio
import time

from gym_compose.collect import progress
from gym_compose.collect.progress import ProgressTracker, read_progress


def test_a_burst_that_nothing_follows_reaches_the_file_after_the_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "MIN_INTERVAL_S", 0.2)
    seen: list[int] = []

    async def burst_then_wait() -> None:
        tracker = ProgressTracker(tmp_path, total=10, callback=lambda snapshot: seen.append(snapshot["done"]))
        tracker.write()
        for _ in range(3):  # within the interval of the start's write
            tracker.record_success({"reward": 1.0})
        assert read_progress(tmp_path)["done"] == 0
        deadline = time.monotonic() + 10  # the trailing write, bounded
        while read_progress(tmp_path)["done"] != 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        tracker.write(finished=True)

    asyncio.run(burst_then_wait())
    assert seen == [0, 3, 3] and read_progress(tmp_path)["finished"] is True


def test_the_final_write_cancels_a_pending_one(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "MIN_INTERVAL_S", 0.2)

    async def finish_inside_the_interval() -> None:
        tracker = ProgressTracker(tmp_path, total=2)
        tracker.record_success({"reward": 1.0})
        tracker.record_success({"reward": 0.0})  # leaves a trailing write pending
        tracker.write(finished=True)
        await asyncio.sleep(0.4)  # past the interval: nothing may overwrite the final state

    asyncio.run(finish_inside_the_interval())
    assert read_progress(tmp_path) | {"rollouts_per_second": None, "started_at": None} == {
        "total": 2, "done": 2, "failed": 0, "rollouts_per_second": None, "mean_reward": 0.5,
        "started_at": None, "finished": True}


def test_without_an_event_loop_counts_wait_for_the_next_write(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "MIN_INTERVAL_S", 60)
    tracker = ProgressTracker(tmp_path, total=2)
    tracker.record_success({})
    tracker.record_success({})
    assert read_progress(tmp_path)["done"] == 1
    tracker.write(finished=True)
    assert read_progress(tmp_path)["done"] == 2
