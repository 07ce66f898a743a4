"""`gym-compose logs`, and `up` attached: follow the logs until Ctrl-C or a server dies."""

from __future__ import annotations

from gym_compose.console import say
from gym_compose.engine.clock import SYSTEM_CLOCK, Clock
from gym_compose.engine.targets.deployed_stack import DeployedStack, RunningProcess, ServiceState
from gym_compose.errors import UserError
from gym_compose.stack.dead_servers import dead_server_logs
from gym_compose.stack.state import existing_project
from gym_compose.stack.teardown import STOP_GRACE_SECONDS, stop_and_remove

WATCH_INTERVAL_SECONDS = 2.0


def attach(stack: DeployedStack, services: list[str], clock: Clock = SYSTEM_CLOCK) -> None:
    """Follow the logs until Ctrl-C (or SIGTERM/SIGHUP) or a server dies, then stop and remove the
    stack. Ctrl-C ends in KeyboardInterrupt (exit 130) once everything is removed."""
    logs: RunningProcess | None = None
    dead: list[ServiceState] = []
    try:
        logs = stack.follow_logs([], follow=True, tail="0")
        say("following the logs; Ctrl-C stops and removes the stack")
        lost_before = stack.check_stack(services).lost  # tasks a swarm lost with a node before this `up`
        while not dead:
            clock.sleep(WATCH_INTERVAL_SECONDS)
            check = stack.check_stack(services).since(lost_before)
            if check.empty:
                say("the stack's containers are gone (removed from outside)")
                break
            dead = check.dead
    except KeyboardInterrupt:
        say(f"\nstopping (grace period {STOP_GRACE_SECONDS}s) ...")
        raise
    finally:
        if logs is not None:
            logs.stop(grace_seconds=5)
        for state in dead:
            say(f"error: {stack.describe_death(state)}")
        for line in dead_server_logs(stack, dead):
            say(line)
        stop_and_remove(stack)
    if dead:
        raise UserError("a server died; the stack was stopped", hint="see the log lines above", exit_code=1)


def logs_command(project_name: str, services: list[str], follow: bool, tail: str | None) -> int:
    logs = existing_project(project_name).follow_logs(services, follow, tail)
    try:
        code = logs.wait()
    except KeyboardInterrupt:
        logs.stop(grace_seconds=5)
        return 130
    if code:
        logs.check()
    return code or 0
