"""Configs the plan and render tests share: the weather stack, a stack that leases sandboxes."""

from __future__ import annotations

from pathlib import Path

IMAGES = {"base": "gym-compose/base:abc"}
SOCKET = ("/var/run/docker.sock", 105, False)


def weather_config(api_key: str = "sk-very-secret") -> dict:
    return {
        "policy_base_url": "http://upstream.example:8000/v1",
        "policy_api_key": api_key,
        "policy_model_name": "m",
        "server_spinup_timeout_seconds": 30,
        "model_endpoint_readiness_timeout_seconds": 20,
        "weather": {"resources_servers": {"weather_impl": {"entrypoint": "app.py", "domain": "agent"}}},
        "Weather_Agent": {
            "responses_api_agents": {
                "simple_agent": {
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": "weather"},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            }
        },
        "weather_env": {
            "environment_servers": {
                "legacy_agent": {
                    "entrypoint": "app.py",
                    "agent_server": {"type": "responses_api_agents", "name": "Weather_Agent"},
                }
            }
        },
        "policy_model": {
            "responses_api_models": {
                "openai_model": {
                    "entrypoint": "app.py",
                    "openai_base_url": "http://upstream.example:8000/v1",
                    "openai_api_key": api_key,
                    "openai_model": "m",
                }
            }
        },
    }


def sandbox_stack_config(sandbox_config=None, **server_keys) -> dict:
    block = {"entrypoint": "app.py", **server_keys}
    if sandbox_config is not None:
        block["sandbox_config"] = sandbox_config
    return {
        "coder": {"resources_servers": {"coder_impl": block}},
        "plain": {"resources_servers": {"plain_impl": {"entrypoint": "app.py"}}},
    }


def weather_roots(tmp_path: Path) -> list[Path]:
    """A search root holding the weather stack's one implementation folder."""
    impl = tmp_path / "server_images" / "weather_impl"
    impl.mkdir(parents=True)
    (impl / "app.py").write_text("print('hi')\n")
    return [tmp_path]


def sandbox_stack_roots(tmp_path: Path) -> list[Path]:
    """A search root holding sandbox_stack_config's two implementation folders."""
    for name in ("coder_impl", "plain_impl"):
        folder = tmp_path / "server_images" / name
        folder.mkdir(parents=True)
        (folder / "app.py").write_text("print('hi')\n")
    return [tmp_path]


def sandbox_compose_model(data: dict, roots, images: dict[str, str]) -> dict:
    """The compose model of `data` planned as project `p`, with the Docker socket for the broker."""
    from gym_compose.plan.model import StackOptions
    from gym_compose.plan.planner import plan_stack
    from gym_compose.render.compose import RenderOptions, compose_model

    stack = plan_stack(data, roots, StackOptions(project="p"))
    return compose_model(stack, images, options=RenderOptions(docker_socket=SOCKET))
