"""Built-in environment servers: legacy_agent (relay) and single_agent_turn."""
