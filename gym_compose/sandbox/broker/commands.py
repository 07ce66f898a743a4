"""A command for a sandbox's agent, and the agent's answer as the API's exec result: its own exit
code, or one of the sandbox's verdicts (timeout 124, OOM 137) with the reason in words."""

from __future__ import annotations

from typing import Any, Optional

from gym_compose.sandbox.broker.launch import proxy_environment
from gym_compose.sandbox.broker.sandboxes import Sandbox, oom_reason
from gym_compose.sandbox.policy import ExecRequest

RUNTIME_FAILURE = 125  # NeMo Gym's code for "the sandbox failed, not the command"
TIMED_OUT = 124


def command_timeout(sandbox: Sandbox, request: ExecRequest) -> Optional[float]:
    return request.timeout_s if request.timeout_s is not None else sandbox.policy.timeout_s


def output_limit(sandbox: Sandbox, request: ExecRequest) -> int:
    return request.max_output_bytes or sandbox.policy.max_output_bytes


def user_refusal(sandbox: Sandbox, request: ExecRequest) -> Optional[dict[str, Any]]:
    """Commands run as the sandbox's own user (no capability to switch); another user is refused."""
    user = request.user
    if user in (None, "") or (sandbox.uid is not None and (user == str(sandbox.uid) or (sandbox.uid == 0 and
                                                                                          user == "root"))):
        return None
    return {"return_code": RUNTIME_FAILURE, "stdout": "", "error_type": "user",
            "stderr": f"gym-compose sandboxes run every command as the sandbox's own user (uid {sandbox.uid}); "
                      f"cannot run as {user!r}: set `user` in the server's sandbox_config instead"}


def agent_exec_request(sandbox: Sandbox, request: ExecRequest) -> dict[str, Any]:
    env = {**sandbox.env, **request.env}
    if sandbox.policy.network == "allowlist":
        proxy = proxy_environment(sandbox.policy, sandbox.phase)
        if sandbox.phase == sandbox.started_phase:
            # the container's environment names this phase's proxy (on Kubernetes, as the service
            # links filled it in): it wins over a declared or a command's own
            env = {key: value for key, value in env.items() if key not in proxy}
        else:
            env.update(proxy)  # moved since its start (Docker only): the proxy of the phase it is in now
    return {"command": request.command, "cwd": request.cwd or sandbox.workdir, "env": env,
            "timeout_s": command_timeout(sandbox, request), "max_output_bytes": output_limit(sandbox, request),
            "shell": sandbox.policy.shell}


def exec_result(sandbox: Sandbox, request: ExecRequest, answer: dict[str, Any]) -> dict[str, Any]:
    if not answer.get("ok"):
        return {"return_code": RUNTIME_FAILURE, "stdout": "", "stderr": str(answer.get("error")),
                "error_type": "sandbox", "reason": str(answer.get("error"))}
    stderr, error_type, reason = answer.get("stderr", ""), None, None
    code = answer.get("return_code")
    if answer.get("timed_out"):
        error_type, code = "timeout", TIMED_OUT
        reason = f"command timed out after {command_timeout(sandbox, request):g} s and was killed"
    elif answer.get("oom"):
        error_type, reason = "oom", oom_reason(sandbox.policy)
    if reason:
        stderr += f"\n[gym-compose] {reason}; the sandbox lives on\n"
    if answer.get("truncated"):
        stderr += f"\n[gym-compose] output truncated to {output_limit(sandbox, request)} bytes per stream\n"
    return {"return_code": code, "stdout": answer.get("stdout", ""), "stderr": stderr, "error_type": error_type,
            "reason": reason, "truncated": bool(answer.get("truncated")), "duration_s": answer.get("duration_s")}
