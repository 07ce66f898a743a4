"""Built-in agents: simple_agent (seed/verify) and gymnasium_agent (reset/step)."""
