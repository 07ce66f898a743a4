"""The broker's pull lines reach the host's progress display: only pull messages, only whole
lines, each once."""

from __future__ import annotations

from gym_compose.runs.pull_progress import PullProgress, pull_lines

LOG = ("2026-11-30 21:00:00,000 INFO gym_compose.sandbox.broker: sandbox broker of p ready: max_live 1\n"
       "2026-11-30 21:00:01,000 INFO gym_compose.sandbox.broker: pulling docker.io/jefzda/sweap-images:a "
       "(not on the engine yet)\n"
       "2026-11-30 21:00:16,000 INFO gym_compose.sandbox.broker: pulling docker.io/jefzda/sweap-images:a: "
       "1.20 of 4.50 GB\n")


def test_only_pull_messages():
    assert pull_lines(LOG) == ["pulling docker.io/jefzda/sweap-images:a (not on the engine yet)",
                               "pulling docker.io/jefzda/sweap-images:a: 1.20 of 4.50 GB"]


def test_new_whole_lines_once(tmp_path):
    path = tmp_path / "sandbox-broker.log"
    path.write_text("earlier run: INFO gym_compose.sandbox.broker: pulled x in 1.0 s\n")
    with open(path, "a") as log:
        progress = PullProgress(None, log, path)
        assert progress.new_lines() == []  # what an earlier run wrote is not shown again
        log.write(LOG + "2026-11-30 21:01:00,000 INFO gym_compose.sandbox.broker: pulled docker.io/jefzda/sw")
        log.flush()
        assert len(progress.new_lines()) == 2 and progress.new_lines() == []
        log.write("eap-images:a in 59.0 s\n")
        log.flush()
        assert progress.new_lines() == ["pulled docker.io/jefzda/sweap-images:a in 59.0 s"]


def test_the_brokers_log_is_followed_from_before_the_collector_starts(tmp_path, monkeypatch):
    """A pull logged while the log follower is still attaching must reach the run folder: the
    follower reads from a moment before the collector (whose leases make the broker pull) starts."""
    from datetime import datetime, timezone

    from gym_compose.engine.targets import compose_project
    from gym_compose.plan.model import COLLECTOR_SERVICE
    from gym_compose.plan.sandbox_names import BROKER_SERVICE
    from gym_compose.runs import supervision

    events: list = []

    class Started:
        def stop(self, grace_seconds):
            return 0

    def start_docker(args, stdout=None, **kwargs):
        events.append(("follow", args, datetime.now(timezone.utc)))
        return Started()

    monkeypatch.setattr(compose_project, "start_docker", start_docker)

    class Stack(compose_project.ComposeProject):
        def run_one_off(self, service, log, args=()):
            events.append(("collector", service, datetime.now(timezone.utc)))
            raise RuntimeError("the engine refused the collector")

    stack = Stack("p")
    try:
        supervision.run_collector(stack, tmp_path, services=[BROKER_SERVICE, "agent"])
    except RuntimeError:
        pass
    (follow, args, _), (collector, service, collector_started) = events
    assert (follow, collector, service) == ("follow", "collector", COLLECTOR_SERVICE)
    since = datetime.strptime(args[args.index("--since") + 1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    assert since <= collector_started and "--tail" not in args and args[-1] == BROKER_SERVICE
