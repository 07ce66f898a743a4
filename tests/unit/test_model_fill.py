"""Every model a config names is served (config/model_fill.py, docs/models.md#every-model-a-config-names):
an undefined or endpoint-less judge gets the mock with a notice, `--model INSTANCE=URL` points it at
an endpoint, env.yaml's keys still work, and a `???` is still an error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_compose.cli.lookup import model_lines
from gym_compose.config import ConfigRequest, load, redact
from gym_compose.errors import UserError

JUDGE_BLOCK = {"responses_api_models": {"openai_model": {
    "entrypoint": "app.py", "openai_base_url": "${judge_base_url}", "openai_api_key": "${judge_api_key}",
    "openai_model": "${judge_model_name}"}}}


def judge_config(tmp_path: Path, judge: dict | None = None, **top: object) -> Path:
    config = {
        "judged": {"resources_servers": {"judged": {
            "entrypoint": "app.py", "domain": "math",
            "judge_model_server": {"type": "responses_api_models", "name": "judge_model"}}}},
        "judged_agent": {"responses_api_agents": {"simple_agent": {
            "entrypoint": "app.py", "resources_server": {"type": "resources_servers", "name": "judged"},
            "model_server": {"type": "responses_api_models", "name": "policy_model"}}}},
        **top,
    }
    if judge is not None:
        config["judge_model"] = judge
    path = tmp_path / "judged.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def loaded(tmp_path: Path, path: Path, *models: str, overrides: tuple[str, ...] = ()):
    return load(ConfigRequest(config_files=[path], named_models=list(models), overrides=list(overrides)), cwd=tmp_path)


def mock_notices(warnings: list[str]) -> list[str]:
    return [w for w in warnings if "serves it" in w]


def test_a_judge_no_config_defines_is_served_by_the_mock_with_one_notice(tmp_path):
    result = loaded(tmp_path, judge_config(tmp_path))
    assert result.data["judge_model"] == {"responses_api_models": {"mock_model": {"entrypoint": "app.py",
                                                                                  "mode": "plain"}}}
    (notice,) = mock_notices(result.warnings)
    assert notice.startswith("notice: judge_model (named by judged.resources_servers.judged.judge_model_server)")
    assert "no config defines it" in notice and "--model judge_model=URL" in notice


@pytest.mark.parametrize("top, why", [
    ({}, "openai_base_url: ${judge_base_url} is not set"),  # the interpolation has no target
    ({"judge_base_url": None, "judge_api_key": None, "judge_model_name": None},
     "openai_base_url is null (${judge_base_url})"),  # NeMo Gym's placeholders (agentif.yaml)
])
def test_a_judge_whose_endpoint_is_unset_is_served_by_the_mock(tmp_path, top, why):
    result = loaded(tmp_path, judge_config(tmp_path, JUDGE_BLOCK, **top))
    assert list(result.data["judge_model"]["responses_api_models"]) == ["mock_model"]
    (notice,) = mock_notices(result.warnings)
    assert why in notice


def test_env_yaml_keys_point_the_judge_at_an_endpoint_as_in_nemo_gym(tmp_path):
    (tmp_path / "env.yaml").write_text(yaml.safe_dump({
        "judge_base_url": "http://judge.example:8000/v1", "judge_api_key": "sk-judge", "judge_model_name": "j"}))
    result = loaded(tmp_path, judge_config(tmp_path, JUDGE_BLOCK))
    block = result.data["judge_model"]["responses_api_models"]["openai_model"]
    assert block["openai_base_url"] == "http://judge.example:8000/v1" and block["openai_model"] == "j"
    assert mock_notices(result.warnings) == []


def test_model_flag_points_any_number_of_named_models_at_endpoints(tmp_path):
    result = loaded(tmp_path, judge_config(tmp_path, JUDGE_BLOCK),
                    "judge_model=http://judge.example:8000/v1,model=Qwen/Qwen3-8B,api_key=sk-judge",
                    "simulator=https://sim.example/v1")
    judge = result.data["judge_model"]["responses_api_models"]["openai_model"]
    assert judge == {"entrypoint": "app.py", "openai_base_url": "http://judge.example:8000/v1",
                     "openai_api_key": "sk-judge", "openai_model": "Qwen/Qwen3-8B"}
    simulator = result.data["simulator"]["responses_api_models"]["openai_model"]
    assert simulator["openai_base_url"] == "https://sim.example/v1" and simulator["openai_api_key"] == "EMPTY"
    assert mock_notices(result.warnings) == []
    assert redact(result.data)["judge_model"]["responses_api_models"]["openai_model"]["openai_api_key"] == "****"
    lines = model_lines(result.data)
    assert "judge_model: openai_model (http://judge.example:8000/v1, model Qwen/Qwen3-8B); named by " \
           "judged.resources_servers.judged.judge_model_server" in lines
    assert any(line.startswith("policy_model: mock_model (the built-in mock, mode oracle)") for line in lines)


def test_model_flag_on_a_vllm_model_sets_its_own_keys(tmp_path):
    vllm = {"responses_api_models": {"vllm_model": {"entrypoint": "app.py", "base_url": None, "model": "m"}}}
    result = loaded(tmp_path, judge_config(tmp_path, vllm), "judge_model=http://v.example:8000/v1")
    block = result.data["judge_model"]["responses_api_models"]["vllm_model"]
    assert block["base_url"] == "http://v.example:8000/v1" and block["model"] == "m"


def test_model_flag_mock_serves_a_judge_whose_config_names_a_hosted_endpoint(tmp_path):
    hosted = {"responses_api_models": {"openai_model": {
        "entrypoint": "app.py", "openai_base_url": "https://api.openai.com/v1", "openai_api_key": "${judge_api_key}",
        "openai_model": "gpt-4.1", "return_token_id_information": True}}}
    config = judge_config(tmp_path, hosted)
    as_configured = loaded(tmp_path, config, overrides=("++judge_api_key=sk",))
    assert list(as_configured.data["judge_model"]["responses_api_models"]) == ["openai_model"]
    result = loaded(tmp_path, config, "judge_model=mock", "simulator=mock")
    assert result.data["judge_model"] == {"responses_api_models": {"mock_model": {
        "entrypoint": "app.py", "mode": "plain", "return_token_id_information": True}}}
    assert result.data["simulator"] == {"responses_api_models": {"mock_model": {"entrypoint": "app.py",
                                                                                "mode": "plain"}}}
    notices = [w for w in result.warnings if "--model judge_model=mock" in w]
    assert notices == ["notice: judge_model is served by the built-in mock model (a fixed answer, mode plain; "
                       "--model judge_model=mock)"]
    assert any(line.startswith("judge_model: mock_model (the built-in mock, mode plain)")
               for line in model_lines(result.data))


@pytest.mark.parametrize("text, says, hint", [
    ("judge_model=mock,model=m", "the built-in mock takes no model= or api_key=", "judge_model=mock"),
    ("policy_model=mock", "is chosen with --model-type mock_model", "--model-type mock_model"),
])
def test_a_malformed_mock_model_flag_is_a_clear_error(tmp_path, text, says, hint):
    with pytest.raises(UserError) as error:
        loaded(tmp_path, judge_config(tmp_path), text)
    assert says in error.value.message and hint in (error.value.hint or "")


@pytest.mark.parametrize("text, says", [
    ("judge_model=", "an instance name and a URL"),
    ("judge_model=judge.example:8000", "not an http(s) URL"),
    ("judge_model=http://j/v1,temperature=0", "is not model=NAME or api_key=KEY"),
])
def test_a_malformed_model_flag_is_a_clear_error(tmp_path, text, says):
    with pytest.raises(UserError) as error:
        loaded(tmp_path, judge_config(tmp_path), text)
    assert says in error.value.message and "INSTANCE=URL" in (error.value.hint or "")


def test_a_value_left_as_required_is_still_an_error_naming_the_key(tmp_path):
    judge = {"responses_api_models": {"openai_model": {
        "entrypoint": "app.py", "openai_base_url": "???", "openai_api_key": "k", "openai_model": "m"}}}
    with pytest.raises(UserError) as error:
        loaded(tmp_path, judge_config(tmp_path, judge))
    assert "++judge_model.responses_api_models.openai_model.openai_base_url=<value>" in error.value.message


def test_the_cli_takes_the_policy_name_and_named_models_side_by_side(tmp_path):
    from typer.testing import CliRunner

    from gym_compose.cli.main import app

    path = judge_config(tmp_path, JUDGE_BLOCK)
    result = CliRunner().invoke(app, [
        "resolve", "--config", str(path), "--model-type", "openai_model", "--model-url", "http://p.example/v1", "--model-api-key", "k",
        "-m", "policy-name", "--model", "judge_model=http://judge.example/v1,api_key=sk-judge-secret"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert data["policy_model_name"] == "policy-name"
    assert data["judge_model"]["responses_api_models"]["openai_model"]["openai_base_url"] == "http://judge.example/v1"
    assert "sk-judge-secret" not in result.stdout + result.stderr
    assert "judge_model: openai_model (http://judge.example/v1" in result.stderr
    twice = CliRunner().invoke(app, ["resolve", "--config", str(path), "-m", "a", "-m", "b"])
    assert isinstance(twice.exception, UserError) and "names the policy model twice" in twice.exception.message


def test_top_level_keys_a_judge_block_interpolates_are_no_typos(tmp_path):
    result = loaded(tmp_path, judge_config(tmp_path, JUDGE_BLOCK, judge_base_url=None, judge_api_key=None,
                                           judge_model_name=None, polcy_base_url="x"))
    assert not any("'judge_base_url'" in w or "'judge_model_name'" in w for w in result.warnings)
    assert any("'polcy_base_url'" in w and "not a known setting" in w for w in result.warnings)  # a real typo


def harness_config(tmp_path: Path) -> Path:
    """An agent that hands its CLI the policy's name from NeMo Gym's env.yaml keys (cline_agent,
    kilocode_agent ...), with no policy model of its own."""
    config = {"harness_agent": {"responses_api_agents": {"cli_agent": {
        "entrypoint": "app.py", "model": "${policy_model_name}",
        "model_server": {"type": "responses_api_models", "name": "policy_model"}}}}}
    path = tmp_path / "harness.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_with_the_built_in_mock_policy_model_name_names_it_and_what_the_user_gives_wins(tmp_path):
    from gym_compose.server.models.mock_model import MOCK_MODEL_NAME

    block = loaded(tmp_path, harness_config(tmp_path)).data["harness_agent"]["responses_api_agents"]["cli_agent"]
    assert block["model"] == MOCK_MODEL_NAME  # the mock's name: what it answers as
    given = loaded(tmp_path, harness_config(tmp_path), overrides=("++policy_model_name=mine",))
    assert given.data["harness_agent"]["responses_api_agents"]["cli_agent"]["model"] == "mine"
    (tmp_path / "env.yaml").write_text("policy_model_name: from-env\n")
    from_env = loaded(tmp_path, harness_config(tmp_path)).data
    assert from_env["harness_agent"]["responses_api_agents"]["cli_agent"]["model"] == "from-env"
    # vLLM's no-key placeholder: no secret, so a manifest keeps it and `eval rerun` does not ask for it
    assert from_env["policy_api_key"] == "EMPTY" and redact(from_env)["policy_api_key"] == "EMPTY"


def test_with_the_built_in_mock_policy_base_url_is_its_address_inside_the_stack(tmp_path):
    """verifif's judge reads ${policy_base_url} and ${policy_api_key}: with the mock, its service."""
    from gym_compose.contract import SERVER_PORT
    from gym_compose.plan.planner import service_name

    judged = {"verifif": {"resources_servers": {"verifif": {
        "entrypoint": "app.py", "domain": "instruction_following", "judge_base_url": "${policy_base_url}",
        "judge_api_key": "${policy_api_key}", "judge_model": "${policy_model_name}"}}}}
    path = tmp_path / "verifif.yaml"
    path.write_text(yaml.safe_dump(judged))
    block = loaded(tmp_path, path).data["verifif"]["resources_servers"]["verifif"]
    assert block["judge_base_url"] == f"http://{service_name('policy_model', 'p' * 40)}:{SERVER_PORT}/v1"
    assert block["judge_api_key"] == "EMPTY"
    given = loaded(tmp_path, path, overrides=("++policy_base_url=http://vllm.example:8000/v1",)).data
    assert given["verifif"]["resources_servers"]["verifif"]["judge_base_url"] == "http://vllm.example:8000/v1"


def test_a_judge_whose_endpoint_is_a_placeholder_is_served_by_the_mock(tmp_path, monkeypatch):
    """arena_judge's judge reads `${oc.env:ARENA_JUDGE_BASE_URL,MISSING}`: unset, it is the word MISSING."""
    monkeypatch.delenv("ARENA_JUDGE_BASE_URL", raising=False)
    judge = {"responses_api_models": {"openai_model": {
        "entrypoint": "app.py", "openai_base_url": "${oc.env:ARENA_JUDGE_BASE_URL,MISSING}",
        "openai_api_key": "${oc.env:ARENA_JUDGE_API_KEY,MISSING}", "openai_model": "judge"}}}
    result = loaded(tmp_path, judge_config(tmp_path, judge))
    assert list(result.data["judge_model"]["responses_api_models"]) == ["mock_model"]
    (notice,) = mock_notices(result.warnings)
    assert "openai_base_url is 'MISSING', not an http(s) URL" in notice

    monkeypatch.setenv("ARENA_JUDGE_BASE_URL", "https://judge.example/v1")  # set, it is the endpoint
    result = loaded(tmp_path, judge_config(tmp_path, judge))
    assert list(result.data["judge_model"]["responses_api_models"]) == ["openai_model"]


def test_a_training_model_block_without_endpoint_gets_a_mock_that_reports_token_ids(tmp_path):
    # as NeMo Gym's vllm_model_for_training.yaml, at an endpoint nobody set
    training = {"responses_api_models": {"vllm_model": {
        "entrypoint": "app.py", "base_url": "${reward_base_url}", "api_key": "EMPTY",
        "model": "reward", "return_token_id_information": True}}}
    result = loaded(tmp_path, judge_config(tmp_path, training))
    assert result.data["judge_model"]["responses_api_models"] == {"mock_model": {
        "entrypoint": "app.py", "mode": "plain", "return_token_id_information": True}}
    plain = loaded(tmp_path, judge_config(tmp_path, JUDGE_BLOCK))
    assert "return_token_id_information" not in plain.data["judge_model"]["responses_api_models"]["mock_model"]
