"""Config dicts of the stacks the protocol tests and the benchmark start."""

from __future__ import annotations

from typing import Any


def mock_model(mode: str = "oracle") -> dict[str, Any]:
    return {"responses_api_models": {"mock_model": {"entrypoint": "app.py", "mode": mode}}}


def seed_verify_stack(resources_impl: str, mode: str = "oracle", proxied: bool = False,
                      api_mode: str = "responses", max_steps: int | None = None) -> dict[str, Any]:
    """environment (legacy_agent) -> simple_agent -> resources + policy_model [-> mock_model]."""
    agent: dict[str, Any] = {
        "entrypoint": "app.py",
        "resources_server": {"type": "resources_servers", "name": resources_impl},
        "model_server": {"type": "responses_api_models", "name": "policy_model"},
    }
    if max_steps is not None:
        agent["max_steps"] = max_steps
    config: dict[str, Any] = {
        resources_impl: {"resources_servers": {resources_impl: {"entrypoint": "app.py", "domain": "agent"}}},
        "agent": {"responses_api_agents": {"simple_agent": agent}},
        "environment": {"environment_servers": {"legacy_agent": {
            "entrypoint": "app.py", "agent_server": {"type": "responses_api_agents", "name": "agent"}}}},
    }
    if proxied:
        config["mock_upstream"] = mock_model(mode)
        config["policy_model"] = {"responses_api_models": {"openai_model": {
            "entrypoint": "app.py", "openai_base_url": "http://127.0.0.1:PORT/v1", "openai_api_key": "none",
            "openai_model": "mock", "api_mode": api_mode, "forward_task_header": True,
        }}}
    else:
        config["policy_model"] = mock_model(mode)
    return config


def point_proxy_at_mock(config: dict[str, Any]) -> dict[str, Any]:
    """After ports are assigned: aim openai_model at the mock upstream's port."""
    upstream = config["mock_upstream"]["responses_api_models"]["mock_model"]
    proxy = config["policy_model"]["responses_api_models"]["openai_model"]
    proxy["openai_base_url"] = f"http://127.0.0.1:{upstream['port']}/v1"
    return config


def gymnasium_stack(resources_impl: str, mode: str = "oracle", max_steps: int = 10) -> dict[str, Any]:
    return {
        resources_impl: {"resources_servers": {resources_impl: {"entrypoint": "app.py", "domain": "games"}}},
        "agent": {"responses_api_agents": {"gymnasium_agent": {
            "entrypoint": "app.py", "max_steps": max_steps,
            "resources_server": {"type": "resources_servers", "name": resources_impl},
            "model_server": {"type": "responses_api_models", "name": "policy_model"}}}},
        "environment": {"environment_servers": {"legacy_agent": {
            "entrypoint": "app.py", "agent_server": {"type": "responses_api_agents", "name": "agent"}}}},
        "policy_model": mock_model(mode),
    }
