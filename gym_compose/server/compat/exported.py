"""The names the compatibility layer gives each NeMo Gym module path, without importing the runtime.

Host-side code (`runtime_choice`) asks only which names exist; resolving them (`names.MODULES`)
imports the whole server runtime (a cost on every CLI command: docs/performance.md). tests/unit/test_runtime_choice.py
checks that this table and `names.MODULES` agree.
"""

from __future__ import annotations

EXPORTED: dict[str, tuple[str, ...]] = {
    "nemo_gym": (),
    "nemo_gym.base_resources_server": (
        "AggregateMetrics", "AggregateMetricsRequest", "BaseResourcesServer", "BaseResourcesServerConfig",
        "BaseRunRequest", "BaseSeedSessionRequest", "BaseSeedSessionResponse", "BaseVerifyRequest",
        "BaseVerifyResponse", "ResourcesCloseSessionRequest", "ResourcesCloseSessionResponse",
        "ResourcesSeedSessionRequest", "ResourcesSeedSessionResponse", "ReverifyMode", "SimpleResourcesServer",
    ),
    "nemo_gym.server_utils": (
        "BaseRunServerInstanceConfig", "BaseServer", "BaseServerConfig", "SESSION_ID_KEY", "ServerClient",
        "SimpleServer", "get_response_json", "raise_for_status",
    ),
    "nemo_gym.openai_utils": (
        "NeMoGymEasyInputMessage", "NeMoGymFunctionCallOutput", "NeMoGymMessage", "NeMoGymResponse",
        "NeMoGymResponseCreateParamsNonStreaming", "NeMoGymResponseFunctionCallOutput",
        "NeMoGymResponseFunctionToolCall", "NeMoGymResponseInputItem", "NeMoGymResponseOutputItem",
        "NeMoGymResponseOutputMessage", "NeMoGymResponseOutputRefusal", "NeMoGymResponseOutputText",
        "NeMoGymResponseReasoningItem", "NeMoGymResponseUsage", "NeMoGymSummary", "accumulate_response_usage",
    ),
    "nemo_gym.episode_types": ("EpisodeId", "TaskId"),
    "nemo_gym.config_types": (
        "AgentServerRef", "AggregateMetrics", "AggregateMetricsRequest", "ModelServerRef", "ResourcesServerRef",
    ),
    "nemo_gym.reward_profile": (
        "AggregateMetricsMixin", "add_avg_sample_std_dev", "compute_aggregate_metrics",
        "compute_pass_majority_metrics", "compute_subset_metrics", "highest_k_metrics",
    ),
    "nemo_gym.verifier_fixture": ("VerifierFixture",),
    "nemo_gym.global_config": ("get_global_config_dict",),
    "nemo_gym.sandbox": (
        "AsyncSandbox", "BrokerProvider", "ExecResult", "Sandbox", "SandboxCreateError",
        "SandboxCreateVerificationError", "SandboxDeadError", "SandboxError", "SandboxExecResult", "SandboxHandle",
        "SandboxPty", "SandboxPtyError", "SandboxResources", "SandboxSnapshot", "SandboxSpec", "SandboxStatus",
        "cpu_cap_env",
        "create_provider", "get_provider_class", "list_providers", "register_provider", "resolve_provider_config",
        "resolve_provider_metadata", "rewrite_image",
    ),
    "nemo_gym.sandbox.api": ("AsyncSandbox", "Sandbox", "SandboxPty"),
    "nemo_gym.sandbox.config": (
        "SANDBOX_BLOCK_DEFAULT_METADATA_KEY", "resolve_provider_config", "resolve_provider_metadata",
    ),
    "nemo_gym.sandbox.providers": (
        "ExecResult", "SandboxCreateError", "SandboxCreateVerificationError", "SandboxExecResult", "SandboxHandle",
        "SandboxProvider", "SandboxPtyError", "SandboxResources", "SandboxSpec", "SandboxStatus", "create_provider",
        "get_provider_class", "list_providers", "register_provider",
    ),
    "nemo_gym.sandbox.providers.base": (
        "ExecResult", "SandboxCreateError", "SandboxCreateVerificationError", "SandboxExecResult", "SandboxHandle",
        "SandboxProvider", "SandboxPtyError", "SandboxResources", "SandboxSpec", "SandboxStatus", "create_provider",
        "get_provider_class", "list_providers", "register_provider",
    ),
    "nemo_gym.sandbox.utils": ("CPU_CAP_ENV_VARS", "cpu_cap_env", "rewrite_image"),
    "nemo_gym.sandbox.access": ("DirectSandboxConnection", "SandboxAccess"),
    "resources_servers": (),
    "resources_servers.gymnasium": (
        "EnvResetRequest", "EnvResetResponse", "EnvStepRequest", "EnvStepResponse", "GymnasiumServer", "extract_text",
    ),
}
