"""Built-in model servers: openai_model (proxy) and mock_model (deterministic, offline)."""
