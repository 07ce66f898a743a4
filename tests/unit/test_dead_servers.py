"""When servers die mid-run, the collector is told to stop before their logs are read, and the
logs of several servers are read at the same time: a lost swarm node's servers each make their
log read wait for its timeout (four of them kept a run's stop waiting a minute)."""

from __future__ import annotations

import threading

from gym_compose.engine.targets.deployed_stack import ServiceState, StackCheck
from gym_compose.runs import supervision
from gym_compose.stack.dead_servers import dead_server_logs


def lost(service: str, replica: int = 1) -> ServiceState:
    return ServiceState(service=service, container=f"p_{service}.{replica}", state="lost", health="",
                        exit_code=0, node="gymnode1")


class Display:
    def close(self):
        pass


class Collector:
    def __init__(self):
        self.told: list[dict] = []
        self.closed = False

    def tell(self, message):
        self.told.append(message)

    def close_stdin(self):
        self.closed = True


class SlowLogStack:
    """Each log read waits until every dead service's read has begun (a barrier): reads made one
    after another never get past the first."""

    def __init__(self, services: int, collector: Collector | None = None):
        self.barrier = threading.Barrier(services, timeout=10)
        self.collector = collector
        self.reads: list[str] = []
        self.told_before_reading: list[bool] = []

    def describe_death(self, state):
        return f"server {state.service} was lost with node {state.node}"

    def log_tail(self, service):
        self.reads.append(service)
        if self.collector is not None:
            self.told_before_reading.append(bool(self.collector.told) and self.collector.closed)
        self.barrier.wait()
        return [f"      {service} said goodbye"]


def test_the_logs_of_each_dead_service_are_read_once_and_together():
    stack = SlowLogStack(services=3)
    dead = [lost("model"), lost("agent", 1), lost("agent", 2), lost("resources"),
            ServiceState(service="gone", container="", state="missing", health="", exit_code=0)]
    lines = dead_server_logs(stack, dead)
    assert sorted(stack.reads) == ["agent", "model", "resources"]  # once each; a missing one has no log
    assert lines == ["  last log lines of model:", "      model said goodbye",
                     "  last log lines of agent:", "      agent said goodbye",
                     "  last log lines of resources:", "      resources said goodbye"]


def test_the_collector_is_stopped_before_the_dead_servers_logs_are_read(capsys):
    collector = Collector()
    stack = SlowLogStack(services=2, collector=collector)
    check = StackCheck(dead=[lost("model"), lost("agent")])
    reason = supervision.report_dead_servers(stack, check, Display(), collector)
    assert reason == "server model was lost with node gymnode1; server agent was lost with node gymnode1"
    assert collector.told == [{"stop": reason}] and collector.closed
    assert stack.told_before_reading == [True, True]
    said = capsys.readouterr().err
    assert said.index("error: server model was lost") < said.index("last log lines of model")


def test_a_run_that_ended_is_not_told_to_stop(capsys):
    stack = SlowLogStack(services=1)
    assert supervision.report_dead_servers(stack, StackCheck(dead=[lost("model")]), Display(),
                                           run_ended=True) == "server model was lost with node gymnode1"
    assert "stopping the run" not in capsys.readouterr().err
