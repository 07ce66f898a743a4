"""Names that NeMo Gym's config format fixes: server types, reserved keys, allowed values."""

from __future__ import annotations

from gym_compose.contract import AGENTS, ENVIRONMENT_SERVERS, MODELS, RESOURCES_SERVERS, SERVER_TYPES

__all__ = ["AGENTS", "ENVIRONMENT_SERVERS", "MODELS", "RESOURCES_SERVERS", "SERVER_TYPES"]  # and the names below

# Top-level keys that configure the run, never a server instance (NeMo Gym 0.7's list, plus the
# policy_* values that model configs interpolate and the knobs of rollout collection).
RESERVED_KEYS: frozenset[str] = frozenset(
    {
        "config_paths",
        "entrypoint",
        "default_host",
        "head_server",
        "disallowed_ports",
        "head_server_deps",
        "python_version",
        "pip_install_verbose",
        "use_absolute_ip",
        "uv_pip_set_python",
        "skip_venv_if_present",
        "hf_token",
        "ray_head_node_address",
        "port_range_low",
        "port_range_high",
        "dry_run",
        "server_spinup_timeout_seconds",
        "model_endpoint_readiness_timeout_seconds",
        "allow_openai_version_skew",
        "uv_cache_dir",
        "uv_lock_timeout_seconds",
        "uv_venv_dir",
        "results_dir",
        "cache_dir",
        "agent_map",
        "agent_name",
        "fan_out",
        "_inherit_from",
        "_copy",
        "nemo_gym_log_dir",
        "verbose",
        "json",
        "query",
        "observability_enabled",
        "model_call_capture_dir",
        "token_id_capture",
        "component_name",
        "skip_verification",
        "skip_verification_reward",
        "telemetry",
        "allow_unsupported_pairing",
        "environment_server_name",
        "environment_server_routes",
        "environment_routing_mode",
        "error_on_agent_without_environment_server",
        "error_on_almost_servers",
        "policy_base_url",
        "policy_api_key",
        "policy_model_name",
        "num_samples_in_parallel",
        "max_resident_rollout_tasks",
        "retain_results_in_memory",
        "disable_aggregation",
        # gym-compose's own, read by every server (docs/servers.md)
        "peer_connect_retry_seconds",
        "peer_request_timeout_seconds",
    }
)

# Fields whose value names another instance: field -> the server type it must name.
REFERENCE_FIELDS: dict[str, str] = {
    "resources_server": RESOURCES_SERVERS,
    "model_server": MODELS,
    "agent_server": AGENTS,
}

DOMAINS: tuple[str, ...] = (
    "math",
    "coding",
    "agent",
    "knowledge",
    "instruction_following",
    "long_context",
    "safety",
    "games",
    "translation",
    "e2e",
    "rlhf",
    "other",
)

DATASET_TYPES: tuple[str, ...] = ("train", "validation", "example", "benchmark")

MISSING_VALUE = "???"
