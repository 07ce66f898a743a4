"""The one-off collector under the host's eye: started with a lease on its stdin, its progress
shown, the stack watched while it runs (a server that dies stops the run, naming it), stopped
cleanly on Ctrl-C. Works on any deployment target (`engine.targets.deployed_stack.DeployedStack`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gym_compose.collect.progress import read_progress
from gym_compose.console import say
from gym_compose.engine.targets.deployed_stack import (
    EXITED_STATES,
    DeployedStack,
    RunningProcess,
    ServiceState,
    StackCheck,
)
from gym_compose.errors import UserError
from gym_compose.plan.model import COLLECTOR_SERVICE
from gym_compose.plan.sandbox_names import BROKER_SERVICE
from gym_compose.runs.progress_display import ProgressDisplay
from gym_compose.runs.pull_progress import PullProgress
from gym_compose.stack.dead_servers import dead_server_logs
from gym_compose.stack.teardown import uninterruptible

COLLECTOR_LOG = "collector.log"
FAILURES_FILE = "rollouts_failures.jsonl"
COLLECTOR_TIMEOUT_SECONDS = 7 * 24 * 3600
COLLECTOR_STOP_SECONDS = 30  # how long a collector asked to stop may take to write what it has
WATCH_INTERVAL_SECONDS = 2.0  # how often the stack is checked for a dead server while collecting
PROGRESS_INTERVAL_SECONDS = 0.5


@dataclass(frozen=True)
class CollectorOutcome:
    exit_code: int
    stopped_for: str | None = None  # a server died: the run was stopped early


def stack_states(stack: DeployedStack) -> list[ServiceState]:
    """Every container of the stack, one-off ones included: for Compose one `docker ps` (a tenth
    of `compose ps`'s time), for the other targets their own listing."""
    return stack.quick_states()


def refuse_second_collector(stack: DeployedStack, states: list[ServiceState] | None = None) -> None:
    """One collector per project: a second would write beside the first (or into its folder).
    `states`: the stack's containers, when just listed (`stack_states`)."""
    if states is None:
        running = stack.one_off_containers(COLLECTOR_SERVICE, running_only=True)
    else:
        running = [s.container for s in states if s.one_off and s.service == COLLECTOR_SERVICE
                   and s.state not in (*EXITED_STATES, "created")]
    if running:
        raise UserError(
            f"a collector of project {stack.name!r} is still running: {', '.join(running)}",
            hint="wait for it to finish, or stop it with `gym-compose down -p "
            f"{stack.name}` (or `docker rm -f {running[0]}`); run another collection at once with -p OTHER",
        )


def require_running(stack: DeployedStack, states: list[ServiceState] | None = None) -> None:
    """--no-serve: the stack must be up and healthy already."""
    states = [s for s in (stack_states(stack) if states is None else states) if not s.one_off]
    unhealthy = [s.service for s in states if not s.serving]
    if not states or unhealthy:
        raise UserError(
            "--no-serve needs the stack to be up and healthy; "
            + (f"not healthy: {', '.join(unhealthy)}" if states else f"project {stack.name!r} has no containers"),
            hint="start it with `gym-compose up -d` and the same config arguments",
        )


def run_collector(stack: DeployedStack, run_dir: Path, services: Sequence[str]) -> CollectorOutcome:
    """Run the collector, showing its progress and watching the servers; a server that dies
    stops the run at once (its rollouts in flight fail naming it). Ctrl-C stops the collector,
    which keeps what it finished, and removes its container."""
    log_path = run_dir / COLLECTOR_LOG
    with open(log_path, "a", encoding="utf-8", errors="replace") as log:
        # The broker may pull a task's image for minutes: say so, or the run seems to stand still.
        # Followed from before the collector starts, so its first lease's pull is in the log too.
        pulls = PullProgress.follow(stack, run_dir) if BROKER_SERVICE in services else None
        try:
            collector = stack.run_one_off(COLLECTOR_SERVICE, log)
        except BaseException:
            if pulls is not None:
                pulls.stop()
            raise
        display = ProgressDisplay(notices=pulls)
        stopped_for = None
        try:
            stopped_for = watch(stack, collector, run_dir, services, display)
            code = collector.wait(COLLECTOR_STOP_SECONDS if stopped_for else None)
            if code is None:
                # asked to stop and still busy: stopping the client leaves the container running,
                # and a collector left running refuses the --resume that the error suggests
                code = collector.stop(5)
                stack.remove_one_off(COLLECTOR_SERVICE)
        except KeyboardInterrupt:
            display.close()
            say("\ninterrupted: stopping the collector; finished rollouts are saved (rerun with --resume)")
            with uninterruptible():
                stop_collector(stack, collector)
            raise
        finally:
            display.update(read_progress(run_dir))
            display.close()
            if pulls is not None:
                pulls.stop()
    if stopped_for:
        return CollectorOutcome(code, stopped_for)
    if code not in (0, 1) or (code == 1 and not (run_dir / FAILURES_FILE).exists()):
        say(f"error: the collector exited with {code}; its output:")
        say(log_path.read_text(errors="replace")[-3000:].rstrip())
        collector.check(engine_only=True)  # the engine's own explanation, when it has one (daemon gone, ...)
    return CollectorOutcome(code)


def watch(stack: DeployedStack, collector: RunningProcess, run_dir: Path, services: Sequence[str],
          display: ProgressDisplay) -> str | None:
    """Until the collector exits: progress every half second, the servers every few seconds.
    Returns why the run was stopped, if a server died."""
    deadline = time.monotonic() + COLLECTOR_TIMEOUT_SECONDS
    next_check = time.monotonic() + WATCH_INTERVAL_SECONDS
    reported_paused: set[str] = set()
    # tasks lost with a swarm node before this run began (a --resume after the loss) are no news
    lost_before = stack.check_stack(services).lost
    while (code := collector.wait(PROGRESS_INTERVAL_SECONDS)) is None:
        display.update(read_progress(run_dir))
        now = time.monotonic()
        if now > deadline:
            say(f"error: the collector ran for more than {COLLECTOR_TIMEOUT_SECONDS} s; stopping it")
            stop_collector(stack, collector)
            return None
        if now < next_check:
            continue
        next_check = now + WATCH_INTERVAL_SECONDS
        check = stack.check_stack(services)
        for service in sorted(set(check.paused) - reported_paused):
            display.close()
            say(f"warning: server {service} is paused; its rollouts wait for it (until "
                "peer_request_timeout_seconds) unless it is unpaused")
        reported_paused = set(check.paused)
        reason = report_dead_servers(stack, check.since(lost_before), display, collector)
        if reason is not None:
            return reason
    if code == 1:  # rollouts failed: a server that died faster than the next look is named all the same
        return report_dead_servers(stack, stack.check_stack(services).since(lost_before), display,
                                   run_ended=True)
    return None


def report_dead_servers(stack: DeployedStack, check: StackCheck, display: ProgressDisplay,
                        collector: RunningProcess | None = None, run_ended: bool = False) -> str | None:
    """Why the run stops when servers died, else None. A running `collector` is told to stop
    first (its rollouts in flight fail at once), then the servers' last log lines are said:
    reading them can take seconds (a lost swarm node's)."""
    if not (check.dead or check.empty):
        return None
    reason = ("; ".join(stack.describe_death(state) for state in check.dead)
              or "every server of the stack is gone")
    if collector is not None:
        collector.tell({"stop": reason})
        collector.close_stdin()
    display.close()
    say(f"error: {reason}" + ("" if run_ended else "; stopping the run"))
    for line in dead_server_logs(stack, check.dead):
        say(line)
    return reason


def stop_collector(stack: DeployedStack, collector: RunningProcess) -> None:
    """Close its lease (it stops and keeps what it finished), give it a moment, then remove it."""
    collector.close_stdin()
    if collector.wait(COLLECTOR_STOP_SECONDS) is None:
        collector.stop(5)
    stack.remove_one_off(COLLECTOR_SERVICE)
