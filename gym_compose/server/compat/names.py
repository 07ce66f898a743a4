"""Which of this runtime's names each NeMo Gym module path exposes."""

from __future__ import annotations

from typing import Any, Callable


def _base_resources_server() -> dict[str, Any]:
    from gym_compose.server import resources

    names = ("BaseResourcesServerConfig", "BaseResourcesServer", "SimpleResourcesServer", "BaseRunRequest",
             "BaseVerifyRequest", "BaseVerifyResponse", "BaseSeedSessionRequest", "BaseSeedSessionResponse",
             "ResourcesSeedSessionRequest", "ResourcesSeedSessionResponse", "ResourcesCloseSessionRequest",
             "ResourcesCloseSessionResponse", "ReverifyMode")
    from gym_compose.server.aggregation import AggregateMetrics, AggregateMetricsRequest

    return {**{name: getattr(resources, name) for name in names},
            "AggregateMetrics": AggregateMetrics, "AggregateMetricsRequest": AggregateMetricsRequest}


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
    from gym_compose.server import responses_api as protocol

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
    from gym_compose.server.aggregation import AggregateMetrics, AggregateMetricsRequest
    from gym_compose.server.base import ServerRef

    return {"ResourcesServerRef": ServerRef, "ModelServerRef": ServerRef, "AgentServerRef": ServerRef,
            "AggregateMetrics": AggregateMetrics, "AggregateMetricsRequest": AggregateMetricsRequest}


def _reward_profile() -> dict[str, Any]:
    from gym_compose.server import reward_profile
    from gym_compose.server.aggregation import AggregateMetricsHooks

    return {**{name: getattr(reward_profile, name) for name in reward_profile.__all__},
            "AggregateMetricsMixin": AggregateMetricsHooks}


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


def _sandbox() -> dict[str, Any]:
    import gym_compose.sandbox as sandbox

    return {name: getattr(sandbox, name) for name in sandbox.__all__}


def _sandbox_api() -> dict[str, Any]:
    from gym_compose.sandbox import api

    return {"AsyncSandbox": api.AsyncSandbox, "Sandbox": api.Sandbox, "SandboxPty": api.SandboxPty}


def _sandbox_config() -> dict[str, Any]:
    from gym_compose.sandbox import provider_config

    return {"resolve_provider_config": provider_config.resolve_provider_config,
            "resolve_provider_metadata": provider_config.resolve_provider_metadata,
            "SANDBOX_BLOCK_DEFAULT_METADATA_KEY": provider_config.DEFAULT_METADATA_KEY}


def _sandbox_providers() -> dict[str, Any]:
    import gym_compose.sandbox as sandbox

    names = ("ExecResult", "SandboxCreateError", "SandboxCreateVerificationError", "SandboxExecResult",
             "SandboxHandle", "SandboxPtyError", "SandboxResources", "SandboxSpec", "SandboxStatus",
             "create_provider", "get_provider_class", "list_providers", "register_provider")
    return {**{name: getattr(sandbox, name) for name in names}, "SandboxProvider": object}


def _sandbox_utils() -> dict[str, Any]:
    from gym_compose.sandbox import utils

    return {"CPU_CAP_ENV_VARS": utils.CPU_CAP_ENV_VARS, "cpu_cap_env": utils.cpu_cap_env,
            "rewrite_image": utils.rewrite_image}


def _sandbox_access() -> dict[str, Any]:
    from typing import Literal

    from pydantic import BaseModel, ConfigDict

    class DirectSandboxConnection(BaseModel):
        model_config = ConfigDict(extra="forbid")
        kind: Literal["direct"] = "direct"
        provider_config_ref: str
        descriptor: dict[str, Any]

    class SandboxAccess(BaseModel):
        model_config = ConfigDict(extra="forbid")
        connection: DirectSandboxConnection
        workdir: str

    return {"DirectSandboxConnection": DirectSandboxConnection, "SandboxAccess": SandboxAccess}


def _global_config() -> dict[str, Any]:
    def get_global_config_dict(*args: Any, **kwargs: Any) -> dict[str, Any]:
        """The whole config this server was started with (NEMO_GYM_CONFIG_DICT, in-network view)."""
        from gym_compose.server.runtime import current_context

        return current_context().global_config

    return {"get_global_config_dict": get_global_config_dict}


def _empty() -> dict[str, Any]:
    return {}


MODULES: dict[str, Callable[[], dict[str, Any]]] = {
    "nemo_gym": _empty,
    "nemo_gym.base_resources_server": _base_resources_server,
    "nemo_gym.server_utils": _server_utils,
    "nemo_gym.openai_utils": _openai_utils,
    "nemo_gym.episode_types": _episode_types,
    "nemo_gym.config_types": _config_types,
    "nemo_gym.reward_profile": _reward_profile,
    "nemo_gym.verifier_fixture": _verifier_fixture,
    "nemo_gym.global_config": _global_config,
    "nemo_gym.sandbox": _sandbox,
    "nemo_gym.sandbox.api": _sandbox_api,
    "nemo_gym.sandbox.config": _sandbox_config,
    "nemo_gym.sandbox.providers": _sandbox_providers,
    "nemo_gym.sandbox.providers.base": _sandbox_providers,
    "nemo_gym.sandbox.utils": _sandbox_utils,
    "nemo_gym.sandbox.access": _sandbox_access,
    "resources_servers": _empty,
    "resources_servers.gymnasium": _gymnasium,
}
