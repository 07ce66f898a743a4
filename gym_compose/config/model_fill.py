"""Every model instance a config names gets a server (docs/models.md#every-model-a-config-names).

Run on the merged config, after `???` values were refused and before interpolations resolve:

- `--model INSTANCE=URL[,model=NAME][,api_key=KEY]` (repeatable) points INSTANCE at an
  OpenAI-compatible endpoint: an `openai_model` / `vllm_model` block (or one with `*base_url`,
  `*api_key`, `*model` keys) gets those values; an instance no config defines, or a mock, becomes
  an `openai_model` block; `--model INSTANCE=mock` serves it with the built-in mock instead, even
  where its config names an endpoint (a hosted judge, a GPU's local vLLM: a run offline or in CI);
- a model instance a server refers to (`{type: responses_api_models, name: X}`: a judge, a reward
  model, a user simulator) that no config defines, or whose endpoint is unset (its `*base_url` is
  null, empty, not an http(s) URL (a placeholder such as `MISSING`), or interpolates a key nobody
  set, as NeMo Gym's judge blocks read
  `${judge_base_url}` from env.yaml), is served by the built-in mock model (mode `plain`: a fixed
  answer, never a tool call; with the block's `return_token_id_information: true`, token ids as
  well), with one notice each saying how to point it at a real model.

`policy_model` keeps its own rules (config/loader.py: the default mock, `--model-url`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError

from gym_compose.config.constants import MODELS, RESERVED_KEYS, SERVER_TYPES
from gym_compose.errors import UserError

POLICY_MODEL = "policy_model"
MOCK = "mock_model"
MOCK_MODE = "plain"
ENDPOINT_MODEL = "openai_model"
NAMED_MODEL_FORM = "INSTANCE=URL[,model=NAME][,api_key=KEY]"
MOCK_URL = "mock"  # --model INSTANCE=mock: the built-in mock, whatever the config names
GENERATED = "generated (mock for an unserved model)"
TOKEN_IDS = "return_token_id_information"  # vllm_model's switch for RL training; the mock has it too


@dataclass(frozen=True)
class NamedModel:
    """One `--model INSTANCE=URL[,model=NAME][,api_key=KEY]`."""

    instance: str
    url: str
    model: Optional[str] = None
    api_key: Optional[str] = None


def is_named_model(text: str) -> bool:
    return "=" in text


def parse_named_model(text: str) -> NamedModel:
    instance, _, rest = text.partition("=")
    parts = rest.split(",")
    url, options = parts[0].strip(), parts[1:]
    hint = f"write --model {NAMED_MODEL_FORM}, e.g. --model judge_model=http://host:8000/v1,model=Qwen/Qwen3-8B"
    if not instance.strip() or not url:
        raise UserError(f"--model {text!r}: an instance name and a URL are needed", hint=hint)
    if url == MOCK_URL:
        if options:
            raise UserError(f"--model {text!r}: the built-in mock takes no model= or api_key=",
                            hint=f"write --model {instance.strip()}={MOCK_URL}")
        if instance.strip() == POLICY_MODEL:
            raise UserError(f"--model {text!r}: the policy model's mock is chosen with --model-type mock_model",
                            hint="leave out --model-url, or pass --model-type mock_model (docs/models.md)")
        return NamedModel(instance.strip(), MOCK_URL)
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--model {text!r}: {url!r} is not an http(s) URL", hint=hint)
    fields: dict[str, str] = {}
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or key.strip() not in ("model", "api_key"):
            raise UserError(f"--model {text!r}: {option!r} is not model=NAME or api_key=KEY", hint=hint)
        fields[key.strip()] = value.strip()
    return NamedModel(instance.strip(), url, fields.get("model"), fields.get("api_key"))


def model_instances(config: dict[str, Any]) -> dict[str, str]:
    """Top-level instance -> its implementation, for every model server instance."""
    found = {}
    for key, value in config.items():
        if key in RESERVED_KEYS or not isinstance(value, dict) or not isinstance(value.get(MODELS), dict):
            continue
        implementations = list(value[MODELS])
        if implementations:
            found[str(key)] = str(implementations[0])
    return found


def model_references(config: dict[str, Any]) -> dict[str, list[str]]:
    """Model instance name -> the server blocks that refer to it (`instance.key.path`)."""
    found: dict[str, list[str]] = {}

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == MODELS and isinstance(node.get("name"), str):
                found.setdefault(node["name"], []).append(path)
                return
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{path}[{index}]")

    for key, value in config.items():
        if key in RESERVED_KEYS or not isinstance(value, dict):
            continue
        for server_type in SERVER_TYPES:
            implementations = value.get(server_type)
            if isinstance(implementations, dict):
                for implementation, block in implementations.items():
                    walk(block, f"{key}.{server_type}.{implementation}")
    return found


def serve_named_models(merged: DictConfig, named: list[NamedModel], origins: dict[str, str]) -> list[str]:
    """Apply each `--model INSTANCE=URL...`; returns one line each for the notices."""
    lines = []
    raw = _raw(merged)
    defined = model_instances(raw)
    for entry in named:
        implementation = defined.get(entry.instance)
        if entry.url == MOCK_URL:
            replaced = merged[entry.instance][MODELS][implementation] if implementation else None
            merged[entry.instance] = OmegaConf.create({MODELS: {MOCK: _mock_block(replaced)}})
            origins[entry.instance] = "--model"
            lines.append(f"notice: {entry.instance} is served by the built-in mock model (a fixed answer, mode "
                         f"{MOCK_MODE}; --model {entry.instance}={MOCK_URL})")
            continue
        block = merged[entry.instance][MODELS][implementation] if implementation and implementation != MOCK else None
        if block is None:
            merged[entry.instance] = OmegaConf.create({MODELS: {ENDPOINT_MODEL: {
                "entrypoint": "app.py", "openai_base_url": entry.url, "openai_api_key": entry.api_key or "EMPTY",
                "openai_model": entry.model or entry.instance}}})
            implementation = ENDPOINT_MODEL
        else:
            keys = [str(key) for key in block.keys()]
            prefix = "openai_" if implementation == ENDPOINT_MODEL else ""
            _set(block, keys, "base_url", entry.url, prefix)
            if entry.api_key is not None or _unresolvable(block, _key_like(keys, "api_key")):
                _set(block, keys, "api_key", entry.api_key or "EMPTY", prefix)
            if entry.model is not None or _unresolvable(block, _key_like(keys, "model")):
                _set(block, keys, "model", entry.model or entry.instance, prefix)
        origins[entry.instance] = "--model"
        lines.append(f"notice: {entry.instance} is served by {implementation} at {entry.url} (--model)")
    return lines


def serve_unserved_models(merged: DictConfig, named: list[NamedModel], origins: dict[str, str]) -> list[str]:
    """The built-in mock for each referenced model instance that is undefined or has no endpoint."""
    raw = _raw(merged)
    defined = model_instances(raw)
    given = {entry.instance for entry in named} | {POLICY_MODEL}
    notices = []
    for name, users in sorted(model_references(raw).items()):
        if name in given or (name not in defined and name in raw):  # another server type: validate names it
            continue
        why: Optional[str] = "no config defines it"
        block = None
        if name in defined:
            block = merged[name][MODELS][defined[name]]
            why = _unset_endpoint(block)
            if why is None:
                continue
        merged[name] = OmegaConf.create({MODELS: {MOCK: _mock_block(block)}})
        origins[name] = GENERATED
        notices.append(
            f"notice: {name} (named by {', '.join(users[:2])}{' ...' if len(users) > 2 else ''}) has no endpoint "
            f"({why}), so the built-in mock model serves it (a fixed answer, mode {MOCK_MODE}); for a real one pass "
            f"--model {name}=URL[,model=NAME][,api_key=KEY], or set the keys its config reads (e.g. judge_base_url, "
            "judge_api_key, judge_model_name) in env.yaml (docs/models.md)")
    return notices


def _mock_block(replaced: Any) -> dict[str, Any]:
    """The built-in mock's block for a model instance, in place of `replaced` (None: none defined);
    a training model block's token ids are kept: the mock reports them too."""
    mock: dict[str, Any] = {"entrypoint": "app.py", "mode": MOCK_MODE}
    if replaced is not None and _is_true(replaced, TOKEN_IDS):
        mock[TOKEN_IDS] = True
    return mock


def _raw(merged: DictConfig) -> dict[str, Any]:
    raw = OmegaConf.to_container(merged, resolve=False)
    assert isinstance(raw, dict)
    return {str(key): value for key, value in raw.items()}


def _unset_endpoint(block: Any) -> Optional[str]:
    if not isinstance(block, DictConfig):
        return None
    urls = [str(key) for key in block.keys() if str(key).endswith("base_url")]
    for key in urls:
        node = block._get_node(key)
        expression = node._value() if node is not None else None
        try:
            value = block[key]
        except (InterpolationKeyError, InterpolationResolutionError):
            return f"{key}: {expression} is not set"
        shown = f" ({expression})" if isinstance(expression, str) and "${" in expression else ""
        if value is None or value == "" or value == []:
            return f"{key} is {'empty' if value is not None else 'null'}{shown}"
        # a placeholder no client can call (arena_judge's `${oc.env:ARENA_JUDGE_BASE_URL,MISSING}`)
        if isinstance(value, str) and not value.startswith(("http://", "https://")):
            return f"{key} is {value!r}, not an http(s) URL{shown}"
    return None


def _is_true(block: Any, key: str) -> bool:
    try:
        return isinstance(block, DictConfig) and block.get(key) is True
    except (InterpolationKeyError, InterpolationResolutionError):
        return False


def _key_like(keys: list[str], suffix: str) -> Optional[str]:
    exact = [key for key in keys if key == suffix or key.endswith("_" + suffix)]
    return exact[0] if exact else None


def _set(block: DictConfig, keys: list[str], suffix: str, value: str, prefix: str) -> None:
    block[_key_like(keys, suffix) or prefix + suffix] = value


def _unresolvable(block: DictConfig, key: Optional[str]) -> bool:
    if key is None:
        return False
    try:
        value = block[key]
    except (InterpolationKeyError, InterpolationResolutionError):
        return True
    return value is None
