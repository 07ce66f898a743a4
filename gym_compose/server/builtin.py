"""Implementations that ship in the base image: name -> "module:attribute" of the server class."""

BUILTIN_IMPLEMENTATIONS: dict[str, str] = {
    "simple_agent": "gym_compose.server.agents.simple_agent:SimpleAgent",
    "gymnasium_agent": "gym_compose.server.agents.gymnasium_agent:GymnasiumAgent",
    "coding_agent": "gym_compose.server.agents.coding_agent:CodingAgent",
    # SWE-bench Pro-format rows (NeMo Gym's resources_servers/swebench_pro config keys); docs/swe.md
    "swebench_pro": "gym_compose.server.swe.verifier:SWEVerifier",
    "openai_model": "gym_compose.server.models.openai_model:OpenAIModel",
    "vllm_model": "gym_compose.server.models.vllm_model:VLLMModel",
    # the model server half of local_vllm_model; the plan adds the vLLM service it talks to
    "local_vllm_model": "gym_compose.server.models.vllm_model:VLLMModel",
    "mock_model": "gym_compose.server.models.mock_model:MockModel",
    "single_agent_turn": "gym_compose.server.environments.single_agent_turn:SingleAgentTurnEnvironmentServer",
    "legacy_agent": "gym_compose.server.environments.legacy_agent:LegacyAgentEnvironmentServer",
}
