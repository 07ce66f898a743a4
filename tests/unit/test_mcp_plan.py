"""A resources server serving /mcp (`expose_tools_over_mcp: true`): its image gets the MCP SDK and
its port is published on the host view, so a harness outside the stack reaches the endpoint."""

from __future__ import annotations

from gym_compose.contract import MCP_REQUIREMENT
from gym_compose.engine.images import lean_images as images
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.plan.requirements import with_extra_requirements
from tests.support.plans import weather_config


def mcp_config() -> dict:
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["expose_tools_over_mcp"] = True
    return config


def test_a_server_serving_mcp_gets_the_sdk_in_its_image_and_a_published_port(roots):
    stack = plan_stack(mcp_config(), roots, StackOptions(head_port=12000))
    weather = stack.service("weather")
    assert weather.extra_requirements == (MCP_REQUIREMENT,)
    assert weather.published_port is not None and 12000 < weather.published_port < 12010
    host = stack.host_config["weather"]["resources_servers"]["weather_impl"]
    assert (host["host"], host["port"]) == ("127.0.0.1", weather.published_port)
    assert stack.service("weather-agent").extra_requirements == ()  # only the server that asked


def test_without_the_key_nothing_changes(roots):
    stack = plan_stack(weather_config(), roots)
    assert stack.service("weather").extra_requirements == ()
    assert stack.service("weather").published_port is None


def test_extra_requirements_join_the_folders_own_unless_it_names_the_package():
    assert with_extra_requirements("", (MCP_REQUIREMENT,)) == MCP_REQUIREMENT + "\n"
    assert with_extra_requirements("numpy==2.0\n", (MCP_REQUIREMENT,)) == f"numpy==2.0\n{MCP_REQUIREMENT}\n"
    assert with_extra_requirements("MCP==1.29.0\n", (MCP_REQUIREMENT,)) == "MCP==1.29.0\n"  # its own pin wins
    assert with_extra_requirements("mcp[cli]>=1.28\n", (MCP_REQUIREMENT,)) == "mcp[cli]>=1.28\n"


def test_the_sdk_changes_the_server_images_tag_and_is_installed(engine, runtime_requirements, roots):
    base = images.ensure_base_image(progress=lambda line: None)
    folder = roots[0] / "server_images" / "weather_impl"
    plain = images.ensure_server_image(folder, base, progress=lambda line: None)
    with_mcp = images.ensure_server_image(folder, base, progress=lambda line: None,
                                          extra_requirements=(MCP_REQUIREMENT,))
    assert plain != with_mcp
    assert engine.commits[-1]["tag"] == with_mcp
    assert any("server-requirements.sh" in part for part in engine.commits[-1]["command"])  # pip installs it
    assert images.expected_tags([(folder, (MCP_REQUIREMENT,))])[-1] != images.expected_tags([folder])[-1]
