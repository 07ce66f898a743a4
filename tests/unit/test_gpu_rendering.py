"""GPU model servers in the rendered project: reservations, the vLLM engine service, the model
cache volume (no GPU or Docker needed; the path is docs/models.md's "vLLM on a GPU")."""

import copy
from pathlib import Path

import pytest
import yaml

from gym_compose.config import ConfigRequest, load
from gym_compose.errors import UserError
from gym_compose.plan.planner import plan_stack
from gym_compose.render.compose import compose_model, write_project

REPO = Path(__file__).resolve().parents[2]
IMAGES = {"base": "gym-compose/base:abc", "example-single-tool-call": "gym-compose/example_single_tool_call:abc"}


def local_vllm_config(**model_overrides) -> dict:
    loaded = load(ConfigRequest(resources_servers=["example_single_tool_call"], model_types=["local_vllm_model"],
                                overrides=["++policy_model_name=Qwen/Qwen3-0.6B"]), cwd=REPO)
    data = copy.deepcopy(loaded.data)
    data["policy_model"]["responses_api_models"]["local_vllm_model"].update(model_overrides)
    return data


def rendered(data: dict) -> dict:
    stack = plan_stack(data, [REPO])
    images = {**IMAGES, **{s.name: s.image for s in stack.services if s.image}}
    return compose_model(stack, images)


def test_local_vllm_model_renders_a_gpu_vllm_service_with_the_cache_on_a_named_volume():
    project = rendered(local_vllm_config(vllm_serve_kwargs={"tensor_parallel_size": 2, "max_model_len": 8192,
                                                            "enable_prefix_caching": True, "trust_remote_code": False}))
    engine = project["services"]["policy-model-vllm"]
    assert engine["image"] == "vllm/vllm-openai:v0.11.0"
    assert engine["deploy"] == {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]}}}
    assert engine["command"] == ["--model", "Qwen/Qwen3-0.6B", "--host", "0.0.0.0", "--port", "8000",
                                 "--tensor-parallel-size", "2", "--max-model-len", "8192", "--enable-prefix-caching"]
    assert engine["volumes"] == [{"type": "volume", "source": "model-cache", "target": "/root/.cache/huggingface"}]
    assert project["volumes"] == {"model-cache": {"name": "gym-compose-model-cache", "external": True}}
    assert engine["environment"]["HF_HOME"] == "/root/.cache/huggingface"
    assert "health" in engine["healthcheck"]["test"][-1] and engine["networks"] == ["gym"]
    # the model server is vllm_model from the base image, aimed at the engine; readiness = /v1/models answers
    model = yaml.safe_load(project["services"]["policy-model"]["environment"]["NEMO_GYM_CONFIG_DICT"])
    spec = model["policy_model"]["responses_api_models"]["local_vllm_model"]
    assert spec["base_url"] == "http://policy-model-vllm:8000/v1"
    assert project["services"]["policy-model"]["image"] == IMAGES["base"]


def test_gpus_and_cache_from_config():
    project = rendered(local_vllm_config(gpus=["0", "3"], model_cache_volume="team-hf-cache",
                                         vllm_image="registry.local/vllm:nightly"))
    engine = project["services"]["policy-model-vllm"]
    assert engine["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0", "3"]
    assert engine["image"] == "registry.local/vllm:nightly"
    assert project["volumes"]["model-cache"]["name"] == "team-hf-cache"
    hf_home = rendered(local_vllm_config(hf_home="/data/hf"))
    assert hf_home["services"]["policy-model-vllm"]["volumes"] == [
        {"type": "bind", "source": "/data/hf", "target": "/root/.cache/huggingface"}]
    assert "volumes" not in hf_home


def test_any_server_can_ask_for_gpus_in_its_docker_block(tmp_path):
    data = local_vllm_config()
    data["example_single_tool_call"]["resources_servers"]["example_single_tool_call"]["docker"] = {"gpus": "all"}
    service = rendered(data)["services"]["example-single-tool-call"]
    assert service["deploy"] == {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}}
    assert "gpus" not in service


@pytest.mark.parametrize("gpus", [0, "some", [], {"count": 1, "device_ids": ["0"]}, True])
def test_a_gpu_request_that_makes_no_sense_names_the_key(gpus):
    data = local_vllm_config()
    data["example_single_tool_call"]["resources_servers"]["example_single_tool_call"]["docker"] = {"gpus": gpus}
    with pytest.raises(UserError, match=r"example_single_tool_call.docker: gpus must be"):
        plan_stack(data, [REPO])


def test_local_vllm_model_without_a_model_says_which_flag_sets_it():
    data = local_vllm_config()
    data["policy_model"]["responses_api_models"]["local_vllm_model"]["model"] = None
    with pytest.raises(UserError, match="local_vllm_model.model: name the model") as caught:
        plan_stack(data, [REPO])
    assert "-m" in caught.value.hint


def test_the_rendered_file_is_valid_yaml_with_the_external_volume(tmp_path):
    stack = plan_stack(local_vllm_config(), [REPO])
    images = {**IMAGES, **{s.name: s.image for s in stack.services if s.image}}
    text = write_project(stack, images, tmp_path).read_text()
    assert yaml.safe_load(text)["volumes"]["model-cache"]["external"] is True
