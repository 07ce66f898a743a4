"""Inference servers (vLLM) as services of the stack, and GPU reservations (pure: no Docker, no files).

`local_vllm_model` (NeMo Gym's name: a model server that starts vLLM itself) becomes two services:
`<instance>-vllm`, the vLLM OpenAI-compatible server from a public image with the GPUs reserved
and the Hugging Face cache on a named volume, and the instance itself, a `vllm_model` whose
`base_url` is that server. The model server's readiness waits for vLLM's `/v1/models`, which
vLLM serves only once the model has loaded: "healthy" means "model loaded".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gym_compose.contract import CACHE_LABEL, DNS_LABEL, shortened
from gym_compose.errors import UserError
from gym_compose.plan.service_spec import GpuRequest, Mount, Probe, parse_gpus

__all__ = ["CACHE_LABEL", "InferenceServer", "inference_base_url", "local_vllm_server"]

LOCAL_VLLM = "local_vllm_model"
DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
VLLM_PORT = 8000
HF_CACHE = "/root/.cache/huggingface"
DEFAULT_CACHE_VOLUME = "gym-compose-model-cache"
CACHE_VOLUME_KEY = "model-cache"
# parallelism keys of vllm_serve_kwargs whose product is the number of GPUs one instance uses
_PARALLEL_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


@dataclass
class InferenceServer:
    """An inference server from its own image, in the plan's words."""

    name: str
    image: str
    command: list[str]
    environment: dict[str, str]
    mounts: list[Mount]
    gpus: GpuRequest
    probe: Probe
    host_ipc: bool = False  # shares the host's IPC namespace (tensor-parallel workers share memory)
    volumes: dict[str, str] = field(default_factory=dict)  # plan volume key -> target volume kept across runs


def serve_arguments(kwargs: dict[str, Any], where: str) -> list[str]:
    """vllm_serve_kwargs as `vllm serve` flags: key -> --key, True -> a bare flag, False/None ->
    left out, a list -> the flag with each value, a mapping -> its JSON."""
    arguments: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            arguments.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            arguments += [flag, *(str(item) for item in value)]
        elif isinstance(value, dict):
            arguments += [flag, json.dumps(value)]
        elif isinstance(value, (str, int, float)):
            arguments += [flag, str(value)]
        else:
            raise UserError(f"{where}.vllm_serve_kwargs.{key}: cannot pass {value!r} on the command line")
    return arguments


def local_vllm_server(instance_name: str, service_name: str, spec: dict[str, Any], start_period_s: int,
                      name_budget: int = DNS_LABEL) -> InferenceServer:
    """The vLLM service for a local_vllm_model instance (its spec is read, not changed), its name
    `SERVICE-vllm` in at most `name_budget` characters (contract.py)."""
    where = f"{instance_name}.responses_api_models.{LOCAL_VLLM}"
    model = spec.get("model")
    if not isinstance(model, str) or not model:
        raise UserError(f"{where}.model: name the model to serve (a Hugging Face id or a path in the container)",
                        hint="e.g. -m Qwen/Qwen3-0.6B (sets policy_model_name)")
    kwargs = spec.get("vllm_serve_kwargs") or {}
    env = spec.get("vllm_serve_env_vars") or {}
    if not isinstance(kwargs, dict) or not isinstance(env, dict):
        raise UserError(f"{where}: vllm_serve_kwargs and vllm_serve_env_vars must be mappings")
    gpus = spec.get("gpus")
    if gpus is None:
        gpus = 1
        for key in _PARALLEL_KEYS:
            size = kwargs.get(key, 1)
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                gpus *= size
    volumes: dict[str, str] = {}
    hf_home = spec.get("hf_home")
    if hf_home:  # NeMo Gym's key: a Hugging Face cache on the host
        cache_mount = Mount("bind", str(hf_home), HF_CACHE)
    else:
        volumes[CACHE_VOLUME_KEY] = str(spec.get("model_cache_volume") or DEFAULT_CACHE_VOLUME)
        cache_mount = Mount("volume", CACHE_VOLUME_KEY, HF_CACHE)
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{VLLM_PORT}/health', timeout=4)"
    return InferenceServer(
        name=shortened(f"{service_name}-vllm", name_budget),
        image=str(spec.get("vllm_image") or DEFAULT_VLLM_IMAGE),
        command=["--model", model, "--host", "0.0.0.0", "--port", str(VLLM_PORT), *serve_arguments(kwargs, where)],
        environment={"HF_HOME": HF_CACHE, **{str(key): str(value) for key, value in env.items()}},
        mounts=[cache_mount],
        gpus=parse_gpus(gpus, where),
        probe=Probe(("python3", "-c", probe), interval_s=10, timeout_s=5, retries=3, start_period_s=start_period_s),
        host_ipc=True,
        volumes=volumes,
    )


def inference_base_url(server: InferenceServer) -> str:
    return f"http://{server.name}:{VLLM_PORT}/v1"
