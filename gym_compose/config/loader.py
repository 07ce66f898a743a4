"""`load`: every config source merged the way NeMo Gym merges them.

Sources, low to high priority: the `config_paths` files (`--config` files, then selector files in
NeMo Gym's fixed category order, with their includes), `env.yaml` in the working directory (or
the request's env file), the request's initial config (the Python API's global config dict), then
the command line (`-m/--model`, `--model-url`, `--model-api-key`, then the overrides). Directives
run on the merged result, then unset values, interpolations, generated environment servers and
validation.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gym_compose.config.constants import MODELS, RESERVED_KEYS, SERVER_TYPES
from gym_compose.config.directives import apply_directives
from gym_compose.config.finalize import raise_on_missing, to_plain
from gym_compose.config.host_environment import environment_paths
from gym_compose.config.includes import ConfigEntry, LoadedFile, load_includes
from gym_compose.config.legacy import add_legacy_environment_servers
from gym_compose.config.model_fill import parse_named_model, serve_named_models, serve_unserved_models
from gym_compose.config.overrides import Override, apply_overrides, parse_overrides
from gym_compose.config.request import ConfigRequest
from gym_compose.config.run_dirs import default_cache_dir
from gym_compose.config.search import SELECTOR_ORDER, find_selector_file, search_roots
from gym_compose.config.validate import validate
from gym_compose.config.yaml_files import read_config_file
from gym_compose.errors import UserError

ENV_FILE = "env.yaml"
_INTERPOLATED_KEY = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # `${judge_base_url}`: a top-level key read
COMMAND_LINE = "the command line"
INITIAL_CONFIG = "the initial global config dict"
DEFAULT_MODEL_TYPE = "mock_model"
DEFAULT_POLICY_MODEL = "policy_model"  # the instance the default model config defines
ENDPOINT_MODEL_TYPE = "openai_model"  # what --model-url means when no model type is selected
MOCK_MODEL_NOTICE = (
    "notice: no model selected, so the built-in mock model serves policy_model; for a real one pass "
    "--model-url URL -m MODEL --model-api-key KEY (an OpenAI-compatible endpoint)"
)
ENDPOINT_MODEL_NOTICE = "notice: --model-url given with no --model-type, so openai_model serves policy_model"


@dataclass
class LoadedConfig:
    data: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    search_roots: list[Path] = field(default_factory=list)
    # top-level key -> the source that last set it (a file path, env.yaml, the command line)
    origins: dict[str, str] = field(default_factory=dict)
    # path -> raw expression of each value the host's environment gave (`${oc.env:VAR}`, VAR set):
    # masked wherever the config is shown or recorded, like a secret (config.host_environment)
    from_environment: dict[tuple[str, ...], str] = field(default_factory=dict)


def load(request: ConfigRequest, cwd: Path | None = None) -> LoadedConfig:
    cwd = (cwd or Path.cwd()).resolve()
    roots = search_roots(request.search_dirs, cwd)
    warnings: list[str] = []

    overrides = _model_flag_overrides(request) + parse_overrides(request.overrides)
    override_paths, overrides = _split_config_paths(overrides)

    env_file = request.env_file or cwd / ENV_FILE
    env_config = read_config_file(env_file) if env_file.is_file() and not request.skip_env_file else None

    top_entries = _top_entries(request, roots, cwd, override_paths)
    if not top_entries and env_config is not None:
        top_entries = [ConfigEntry(text=str(p), first_root=cwd, included_by=env_file)
                       for p in _as_path_list(env_config.get("config_paths"), env_file)]
    included = load_includes(top_entries, roots) if top_entries else None
    files = list(included.files_in_merge_order) if included else []
    if included and included.duplicates:
        warnings.append("note: config(s) included more than once, loaded once: "
                        + ", ".join(sorted(set(included.duplicates))))

    initial = OmegaConf.create(request.initial_config) if request.initial_config else None
    sources = [f.config for f in files] + ([env_config] if env_config else []) + ([initial] if initial else [])
    if not request.model_types and _needs_a_default_policy_model(sources, bool(request.model_url)):
        model_type = ENDPOINT_MODEL_TYPE if request.model_url else DEFAULT_MODEL_TYPE
        default = find_selector_file("model_type", model_type, roots)
        files = list(load_includes([ConfigEntry(str(default.path), default.root)], roots).files_in_merge_order) + files
        warnings.append(ENDPOINT_MODEL_NOTICE if request.model_url else MOCK_MODEL_NOTICE)

    origins: dict[str, str] = {}
    merged = _merge_sources(files, env_config, env_file, origins, initial)
    apply_overrides(merged, overrides)
    for override in overrides:
        origins[override.key.split(".")[0]] = COMMAND_LINE
    if included:
        merged["config_paths"] = included.entries

    warnings += apply_directives(merged, origins)
    default_cache_dir(merged, cwd)
    raise_on_missing(merged, origins)
    interpolated = frozenset(_INTERPOLATED_KEY.findall(repr(OmegaConf.to_container(merged, resolve=False))))
    named = [parse_named_model(text) for text in request.named_models]
    warnings += serve_named_models(merged, named, origins)
    warnings += serve_unserved_models(merged, named, origins)
    raw = OmegaConf.to_container(merged, resolve=False)
    from_environment = environment_paths(raw, os.environ)
    data = to_plain(merged)

    legacy_warnings = add_legacy_environment_servers(data)
    for name in data:
        origins.setdefault(name, "generated")
    warnings += validate(data, origins, interpolated)
    warnings += legacy_warnings
    return LoadedConfig(data=data, warnings=warnings, search_roots=roots, origins=origins,
                        from_environment=from_environment)


def _model_flag_overrides(request: ConfigRequest) -> list[Override]:
    flags = [("-m/--model", "policy_model_name", request.model_name),
             ("--model-url", "policy_base_url", request.model_url),
             ("--model-api-key", "policy_api_key", request.model_api_key)]
    return [Override(text=f"{flag} ...", key=key, value=value, kind="force_add")
            for flag, key, value in flags if value is not None]


def _split_config_paths(overrides: list[Override]) -> tuple[list[str], list[Override]]:
    paths: list[str] = []
    rest: list[Override] = []
    for override in overrides:
        if override.key == "config_paths" and override.kind != "delete":
            value = override.value
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise UserError(f"override {override.text!r}: config_paths must be a list of paths",
                                hint="e.g. '+config_paths=[a.yaml,b.yaml]', or use --config")
            paths += value
        else:
            rest.append(override)
    return paths, rest


def _as_path_list(value: Any, source: Path) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    items = list(value) if not isinstance(value, (dict, DictConfig)) else None
    if items is None or not all(isinstance(v, str) for v in items):
        raise UserError(f"{source}: config_paths must be a list of file paths, got {value!r}")
    return items


def _top_entries(request: ConfigRequest, roots: list[Path], cwd: Path, override_paths: list[str]) -> list[ConfigEntry]:
    entries = [ConfigEntry(text=str(path), first_root=cwd) for path in request.config_files]
    selected = {
        "benchmark": request.benchmarks,
        "environment": request.environments,
        "resources_server": request.resources_servers,
        "model_type": request.model_types,
        "agent_type": request.agent_types,
    }
    for kind in SELECTOR_ORDER:
        for value in selected[kind]:
            found = find_selector_file(kind, value, roots)
            entries.append(ConfigEntry(text=str(found.path), first_root=found.root))
    entries += [ConfigEntry(text=path, first_root=cwd) for path in override_paths]
    return entries


def _needs_a_default_policy_model(configs: list[DictConfig], model_url_given: bool) -> bool:
    """No `policy_model` is defined, and something needs one.

    Needed: a server refers to `policy_model`, or no model is defined at all while there are
    servers (or no config at all, or --model-url names an endpoint). A judge model or another
    model beside it does not stand in for the policy; an overlay alone (no `entrypoint` anywhere)
    needs nothing.
    """
    plain = [OmegaConf.to_container(config, resolve=False) for config in configs]
    models = [key for config in plain if isinstance(config, dict) for key, value in config.items()
              if key not in RESERVED_KEYS and isinstance(value, dict) and MODELS in value]
    if DEFAULT_POLICY_MODEL in models:
        return False
    if any(_refers_to_policy_model(config) for config in plain):
        return True
    return not models and (model_url_given or not configs or _defines_a_server(configs))


def _refers_to_policy_model(node: Any) -> bool:
    """A `{type: responses_api_models, name: policy_model}` reference anywhere in a plain config."""
    if isinstance(node, dict):
        if node.get("name") == DEFAULT_POLICY_MODEL and node.get("type") == MODELS:
            return True
        return any(_refers_to_policy_model(value) for value in node.values())
    if isinstance(node, list):
        return any(_refers_to_policy_model(item) for item in node)
    return False


def _defines_a_server(configs: list[DictConfig]) -> bool:
    """Whether any source has a block with an `entrypoint`: an overlay alone needs no default model."""
    for config in configs:
        for key in config.keys():
            value = config._get_node(key)
            if key in RESERVED_KEYS or not isinstance(value, DictConfig):
                continue
            for server_type in SERVER_TYPES:
                implementations = value.get(server_type)
                if isinstance(implementations, DictConfig) and any(
                        isinstance(spec, DictConfig) and "entrypoint" in spec for spec in implementations.values()):
                    return True
    return False


def _merge_sources(files: list[LoadedFile], env_config: DictConfig | None, env_file: Path,
                   origins: dict[str, str], initial: DictConfig | None = None) -> DictConfig:
    sources: list[tuple[str, DictConfig]] = [(str(f.path), f.config) for f in files]
    if env_config is not None:
        sources.append((str(env_file), env_config))
    if initial is not None:
        sources.append((INITIAL_CONFIG, initial))
    merged = OmegaConf.create({})
    for label, config in sources:
        try:
            merged = cast(DictConfig, OmegaConf.merge(merged, config))  # dicts merged stay a DictConfig
        except OmegaConfBaseException as error:
            raise UserError(f"{label}: cannot merge this file over the configs before it: "
                            f"{str(error).splitlines()[0]}") from None
        for key in config.keys():
            origins[str(key)] = label
    OmegaConf.set_struct(merged, False)
    return merged
