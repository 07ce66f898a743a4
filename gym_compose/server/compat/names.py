"""Which of this runtime's names each NeMo Gym module path exposes."""

from __future__ import annotations

from typing import Any, Callable


def _base_resources_server() -> dict[str, Any]:
    from gym_compose.server import resources

    names = ("BaseResourcesServerConfig", "BaseResourcesServer", "SimpleResourcesServer", "BaseRunRequest",
             "BaseVerifyRequest", "BaseVerifyResponse", "BaseSeedSessionRequest", "BaseSeedSessionResponse",
             "ResourcesSeedSessionRequest", "ResourcesSeedSessionResponse", "ResourcesCloseSessionRequest",
             "ResourcesCloseSessionResponse")
    return {name: getattr(resources, name) for name in names}


def _server_utils() -> dict[str, Any]:
    from gym_compose.server import base
    from gym_compose.server.peers import PeerClient
    from gym_compose.server.sessions import SESSION_ID_KEY

    async def raise_for_status(response) -> None:
        if not response.ok:
            raise RuntimeError(f"HTTP {response.status}: {response.body[:2000].decode('utf-8', 'replace')}")

    async def get_response_json(response):
        return response.json()

    return {"SESSION_ID_KEY": SESSION_ID_KEY, "BaseServer": base.BaseServer, "SimpleServer": base.SimpleServer,
            "BaseRunServerInstanceConfig": base.BaseRunServerInstanceConfig, "BaseServerConfig": base.BaseServerConfig,
            "ServerClient": PeerClient, "raise_for_status": raise_for_status, "get_response_json": get_response_json}


def _openai_utils() -> dict[str, Any]:
    from gym_compose.server import protocol

    return {
        "NeMoGymResponse": protocol.Response,
        "NeMoGymResponseCreateParamsNonStreaming": protocol.ResponseCreateParams,
        "NeMoGymResponseFunctionToolCall": protocol.FunctionCall,
        "NeMoGymFunctionCallOutput": protocol.FunctionCallOutput,
        "NeMoGymResponseFunctionCallOutput": protocol.FunctionCallOutput,
        "NeMoGymEasyInputMessage": protocol.InputMessage,
        "NeMoGymMessage": protocol.InputMessage,
        "NeMoGymResponseOutputMessage": protocol.OutputMessage,
        "NeMoGymResponseOutputText": protocol.OutputText,
        "NeMoGymResponseOutputRefusal": protocol.Refusal,
        "NeMoGymResponseReasoningItem": protocol.ReasoningItem,
        "NeMoGymSummary": protocol.SummaryText,
        "NeMoGymResponseUsage": protocol.Usage,
        "NeMoGymResponseInputItem": protocol.InputItem,
        "NeMoGymResponseOutputItem": protocol.OutputItem,
        "accumulate_response_usage": protocol.add_usage,
    }


def _episode_types() -> dict[str, Any]:
    return {"EpisodeId": str, "TaskId": str}


def _config_types() -> dict[str, Any]:
    from gym_compose.server.base import ServerRef

    return {"ResourcesServerRef": ServerRef, "ModelServerRef": ServerRef, "AgentServerRef": ServerRef}


def _verifier_fixture() -> dict[str, Any]:
    class VerifierFixture:
        """Accepted so NeMo Gym app.py files that declare one import; the runtime does not use it."""

        def __init__(self, **kwargs: Any):
            self.__dict__.update(kwargs)

    return {"VerifierFixture": VerifierFixture}


def _gymnasium() -> dict[str, Any]:
    from gym_compose.server import gymnasium

    names = ("GymnasiumServer", "EnvResetRequest", "EnvResetResponse", "EnvStepRequest", "EnvStepResponse",
             "extract_text")
    return {name: getattr(gymnasium, name) for name in names}


def _empty() -> dict[str, Any]:
    return {}


MODULES: dict[str, Callable[[], dict[str, Any]]] = {
    "nemo_gym": _empty,
    "nemo_gym.base_resources_server": _base_resources_server,
    "nemo_gym.server_utils": _server_utils,
    "nemo_gym.openai_utils": _openai_utils,
    "nemo_gym.episode_types": _episode_types,
    "nemo_gym.config_types": _config_types,
    "nemo_gym.verifier_fixture": _verifier_fixture,
    "resources_servers": _empty,
    "resources_servers.gymnasium": _gymnasium,
}
