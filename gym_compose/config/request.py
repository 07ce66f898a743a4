"""What the user asked for: the config arguments shared by every stack command."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ConfigRequest:
    config_files: list[Path] = field(default_factory=list)
    resources_servers: list[str] = field(default_factory=list)
    model_types: list[str] = field(default_factory=list)
    agent_types: list[str] = field(default_factory=list)
    benchmarks: list[str] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)
    model_name: str | None = None
    model_url: str | None = None
    model_api_key: str | None = None
    # `--model INSTANCE=URL[,model=NAME][,api_key=KEY]`: other model instances (config/model_fill.py)
    named_models: list[str] = field(default_factory=list)
    search_dirs: list[Path] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    env_file: Path | None = None  # instead of env.yaml in the working directory (NeMo Gym's dotenv_path)
    skip_env_file: bool = False  # read no env.yaml at all (NeMo Gym's skip_load_from_dotenv)
    # a config merged over the files and env.yaml, under the overrides (NeMo Gym's initial_global_config_dict)
    initial_config: dict[str, Any] | None = None
