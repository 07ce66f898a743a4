"""Config -> Stack: what runs, as pure functions of the merged config (no Docker, no files)."""
