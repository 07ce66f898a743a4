"""The NeMo Gym 0.7 / OpenAI SDK conveniences that resources servers use, served by the runtime's compat layer."""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import ClassVar

from fastapi.testclient import TestClient

from gym_compose.server import compat
from gym_compose.server.responses_api import Response

RESPONSE = {"output": [
    {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "thinking"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The answer "},
                                                         {"type": "refusal", "refusal": "no"},
                                                         {"type": "output_text", "text": "is 4."}]},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "!"}]},
]}


def nemo_gym(module: str):
    compat.install(force=True)
    return importlib.import_module(module)


def test_response_output_text_joins_the_output_text_parts_as_the_openai_sdk_does():
    response = nemo_gym("nemo_gym.openai_utils").NeMoGymResponse.model_validate(RESPONSE)
    assert response.output_text == "The answer is 4.!"  # reasoning, refusal and tool calls are not text
    assert Response.model_validate({"output": []}).output_text == ""


def test_to_dict_and_to_json_keep_only_what_was_set():
    response = Response.model_validate(RESPONSE)
    assert response.to_dict() == RESPONSE
    assert json.loads(response.to_json()) == RESPONSE


def test_reverify_mode_is_a_class_setting_of_the_config():
    base = nemo_gym("nemo_gym.base_resources_server")
    assert [mode.value for mode in base.ReverifyMode] == ["stateless", "unsupported", "unknown"]

    class StatelessConfig(base.BaseResourcesServerConfig):
        REVERIFY_MODE: ClassVar[base.ReverifyMode] = base.ReverifyMode.STATELESS

    class Server(base.SimpleResourcesServer):
        config: StatelessConfig

    server = Server(config=StatelessConfig(name="s", domain="math", num_workers=4))
    assert asyncio.run(server.get_reverify_mode()) is base.ReverifyMode.STATELESS
    assert base.BaseResourcesServerConfig(name="t").REVERIFY_MODE is base.ReverifyMode.UNKNOWN
    assert server.config.num_workers == 4 and base.BaseResourcesServerConfig(name="t").num_workers is None


def test_gymnasium_cleanup_session_runs_when_an_episode_ends_and_on_close():
    gymnasium = nemo_gym("resources_servers.gymnasium")
    released: list = []

    class OneStep(gymnasium.GymnasiumServer):
        async def step(self, action, metadata, session_id=None):
            self.session_state[session_id] = "state"
            return "done", 1.0, True, False, {}

        def _cleanup_session(self, session_id):
            released.append(session_id)
            super()._cleanup_session(session_id)

    from gym_compose.server.resources import BaseResourcesServerConfig

    server = OneStep(config=BaseResourcesServerConfig(name="g", domain="games"))
    client = TestClient(server.setup_webserver())
    client.post("/reset", json={"responses_create_params": {"input": "go"}})
    answer = client.post("/step", json={"responses_create_params": {"input": "go"}, "response": {"output": []}})
    assert answer.json()["terminated"] is True
    assert len(released) == 1 and server.session_state == {}
    asyncio.run(server.close_session("other"))
    assert released[-1] == "other"


def test_a_verify_body_from_nemo_gyms_own_agents_validates():
    # NeMo Gym 0.7's agents dump its whole NeMoGymResponseCreateParamsNonStreaming, None included
    from gym_compose.server.responses_api import ResponseCreateParams

    dumped = {"input": "hi", "context_management": None, "moderation": None, "prompt_cache_retention": None,
              "background": None, "conversation": None, "tool_choice": "auto", "tools": []}
    assert ResponseCreateParams.model_validate(dumped).input == "hi"


def test_resources_of_a_module_resolve_to_its_folder_as_on_python_3_12(tmp_path, monkeypatch):
    import importlib.resources as resources
    import sys

    package = tmp_path / "sokoban_like" / "envs"
    package.mkdir(parents=True)
    (tmp_path / "sokoban_like" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "render_utils.py").write_text("")
    (package / "surface.txt").write_text("wall")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(resources, "files", resources.files)  # put back after the test
    for name in ("sokoban_like", "sokoban_like.envs", "sokoban_like.envs.render_utils"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    compat._resources_of_a_module()
    # what pkg_resources.resource_filename(__name__, ...) shims do with a module's name
    assert resources.files("sokoban_like.envs.render_utils").joinpath("surface.txt").read_text() == "wall"
    assert resources.files("sokoban_like.envs").joinpath("surface.txt").read_text() == "wall"
    wrapped = resources.files
    compat._resources_of_a_module()  # installed again (a second server start): not wrapped twice
    assert resources.files is wrapped
