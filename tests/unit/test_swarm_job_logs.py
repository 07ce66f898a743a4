"""The collector job's log on a swarm: `docker service logs --follow` never ends by itself once the
job has (Engine 20.10, not even after `service rm`), so it is stopped once the log it writes has
stood still, not after a fixed wait of 10 s after every run. Time is a fake clock: each look at
the follower advances it."""

from __future__ import annotations

from gym_compose.engine.targets import swarm_stack
from gym_compose.engine.targets.deployed_stack import ServiceState


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class Follower:
    """A `service logs --follow` that never ends; writes `lines` into the log, one per look, while
    its clock is before `writes_until`."""

    def __init__(self, clock, log, writes_until=0.0):
        self.clock, self.log, self.writes_until = clock, log, writes_until
        self.stopped_at = None

    def wait(self, timeout=None):
        self.clock.sleep(timeout or 0)
        if self.clock.now < self.writes_until:
            with open(self.log.name, "a") as out:
                out.write(f"collect: line at {self.clock.now:.1f}\n")
        return None

    def stop(self, grace_seconds):
        self.stopped_at = self.clock.now
        return 143


class Stack:
    def __init__(self):
        self.removed = []

    def ps(self):
        return [ServiceState(service="collector", container="p_collector.x", state="exited", health="",
                             exit_code=0, one_off=True)]

    def remove_one_off(self, service=None):
        self.removed.append(service)


def finished_job(monkeypatch, tmp_path, writes_until=0.0, as_file=True):
    clock = Clock()
    monkeypatch.setattr(swarm_stack, "time", clock)
    log = open(tmp_path / "collector.log", "a") if as_file else None
    follower = Follower(clock, log or open(tmp_path / "other.log", "a"), writes_until)
    job = swarm_stack.SwarmJob(Stack(), "collector", follower, log)
    return job, follower, clock


def test_the_follower_is_stopped_once_the_log_stood_still(monkeypatch, tmp_path):
    job, follower, clock = finished_job(monkeypatch, tmp_path)
    assert job.wait() == 0
    # the job's last second, then one settled second: nowhere near the 10 s drain bound
    assert follower.stopped_at is not None and follower.stopped_at <= 1.0 + swarm_stack.LOG_SETTLED_SECONDS + 0.5
    assert job.stack.removed == ["collector"]


def test_a_log_still_growing_is_followed_until_it_stops_growing(monkeypatch, tmp_path):
    job, follower, clock = finished_job(monkeypatch, tmp_path, writes_until=4.0)
    assert job.wait() == 0
    assert 4.0 + swarm_stack.LOG_SETTLED_SECONDS - 0.3 <= follower.stopped_at <= 4.0 + swarm_stack.LOG_SETTLED_SECONDS + 0.5
    assert "line at 3.8" in (tmp_path / "collector.log").read_text()


def test_a_log_that_never_stops_growing_or_is_no_file_is_given_the_drain_bound(monkeypatch, tmp_path):
    job, follower, _ = finished_job(monkeypatch, tmp_path, writes_until=1e9)
    job.wait()
    assert follower.stopped_at is not None and abs(follower.stopped_at - (1.0 + swarm_stack.LOG_DRAIN_SECONDS)) <= 0.5
    job, follower, _ = finished_job(monkeypatch, tmp_path, as_file=False)
    job.wait()
    assert abs(follower.stopped_at - (1.0 + swarm_stack.LOG_DRAIN_SECONDS)) <= 0.5
