"""The NeMo Gym server sweep (bench/_support/nemo_gym_sweep.py, run by bench/bench_nemo_gym_servers.py): which config the sweep passes with a server's example rows,
and the exclusions it decides before running a server."""

import json
import time
from pathlib import Path

import pytest

from bench._support import nemo_gym_sweep as sweep
from gym_compose.contract import MAX_PROJECT, project_too_long


def agent_block(name: str, resources_server: str) -> str:
    return (f"{name}:\n  responses_api_agents:\n    simple_agent:\n      entrypoint: app.py\n"
            f"      resources_server: {{type: resources_servers, name: {resources_server}}}\n")


def server(tmp_path: Path, name: str, flavors: dict[str, list[str]], row_agent: str | None) -> Path:
    folder = tmp_path / "resources_servers" / name
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "app.py").write_text("")
    for flavor, agents in flavors.items():
        text = f"{flavor}_rs:\n  resources_servers:\n    {name}:\n      entrypoint: app.py\n"
        text += "".join(agent_block(agent, f"{flavor}_rs") for agent in agents)
        (folder / "configs" / f"{flavor}.yaml").write_text(text)
    row = {"responses_create_params": {"input": "hi"}}
    if row_agent:
        row["agent_ref"] = {"type": "responses_api_agents", "name": row_agent}
    (folder / "data" / "example.jsonl").write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    return folder


def test_the_flavor_that_defines_the_rows_agent_is_chosen_as_a_nemo_gym_user_would(tmp_path):
    # format_verification: the alphabetically first flavor (citation_format) lacks the rows' agent
    folder = server(tmp_path, "format_verification",
                    {"citation_format": ["citation_format_simple_agent"],
                     "freeform_formatting": ["freeform_formatting_simple_agent"]},
                    "freeform_formatting_simple_agent")
    assert sweep.selector(folder) == "format_verification/freeform_formatting"


def test_the_servers_own_config_wins_when_it_defines_the_rows_agent(tmp_path):
    folder = server(tmp_path, "thing", {"a_other": ["thing_agent"], "thing": ["thing_agent"]}, "thing_agent")
    assert sweep.selector(folder) == "thing"


def test_without_a_flavor_defining_the_rows_agent_the_old_choice_stands(tmp_path):
    # the servers own config first, else the first flavor; agent_override re-routes later
    own = server(tmp_path, "own", {"b": ["b_agent"], "own": ["own_agent"]}, "simple_agent")
    assert sweep.selector(own) == "own"
    flavored = server(tmp_path, "flavored", {"b": ["b_agent"], "a": ["a_agent"]}, None)
    assert sweep.selector(flavored) == "flavored/a"


def test_rows_naming_another_agent_of_a_one_agent_config_are_re_routed(tmp_path):
    folder = server(tmp_path, "solo", {"solo": ["solo_simple_agent"]}, "simple_agent")
    config = {"solo_rs": {"resources_servers": {"solo": {}}},
              "solo_simple_agent": {"responses_api_agents": {"simple_agent": {}}}}
    assert sweep.agent_override(config, folder / "data" / "example.jsonl") == ["++agent_name=solo_simple_agent"]
    config["solo_simple_agent_2"] = {"responses_api_agents": {"simple_agent": {}}}
    assert sweep.agent_override(config, folder / "data" / "example.jsonl") == []


def test_tabled_exclusions_give_their_reason_before_anything_runs(tmp_path):
    config = {"x": {"resources_servers": {"x": {}}}}
    for name, word in (("scicode", "test_data.h5"), ("wordle", "guesses.txt"),
                       ("spider2_lite", "Google Drive"), ("rolemrc", "torch")):
        folder = tmp_path / name
        folder.mkdir()
        why = sweep.exclusion(folder, config)
        assert why and word in why, (name, why)


def test_a_run_past_its_timeout_is_stopped_with_its_children(tmp_path):
    # `up` starts `docker build`; the sweep once killed `up` alone and the build ran on, orphaned
    script = f"sleep 30 & echo $! > {tmp_path}/child; echo started; wait"
    returncode, output = sweep.run_bounded(["sh", "-c", script], tmp_path, timeout=2)
    assert returncode is None
    assert "started" in output
    child = int((tmp_path / "child").read_text())
    # a process closes its files (the pipe) before it is a zombie: give its exit a moment
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_run_within_its_timeout_gives_its_status_and_output(tmp_path):
    assert sweep.run_bounded(["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path, timeout=30) == (3, "out\nerr\n")


def test_a_judge_of_its_own_engine_or_at_a_hosted_endpoint_is_served_by_the_mock_not_excluded(tmp_path):
    folder = tmp_path / "judged"
    folder.mkdir()
    mocked = {"x": {"resources_servers": {"x": {}}},
              "judge_model": {"responses_api_models": {"mock_model": {"mode": "plain"}}}}
    assert sweep.exclusion(folder, mocked) is None and sweep.mocked_models(mocked) == {}
    engine = {**mocked, "genrm_model": {"responses_api_models": {"genrm_model": {"model": "m"}}}}
    assert sweep.exclusion(folder, engine) is None
    assert sweep.mocked_models(engine) == {"genrm_model": "genrm_model, its own engine"}
    assert sweep.mock_model_flags(sweep.mocked_models(engine)) == ["--model", "genrm_model=mock"]


def test_a_model_server_in_front_of_the_stacks_mock_policy_runs_and_one_at_a_hosted_endpoint_is_mocked(tmp_path):
    folder = tmp_path / "compacted"
    folder.mkdir()
    policy_url = "http://policy-model:8000/v1"
    config = {"x": {"resources_servers": {"x": {}}}, "policy_base_url": policy_url,
              "policy_model": {"responses_api_models": {"mock_model": {"mode": "oracle"}}},
              "policy_model_for_compaction": {"responses_api_models": {"vllm_model_with_compaction": {
                  "base_url": policy_url, "return_token_id_information": True}}}}
    assert sweep.exclusion(folder, config) is None  # vllm_model_for_compaction.yaml on the mock: it runs
    assert sweep.mocked_models(config) == {}
    hosted = {**config, "policy_model_for_compaction": {"responses_api_models": {"vllm_model_with_compaction": {
        "base_url": "https://hosted.example/v1", "api_key": "sk-hosted-key"}}}}
    assert sweep.exclusion(folder, hosted) is None  # its api_key is the mock's to ignore, not an external service
    assert sweep.mocked_models(hosted) == {
        "policy_model_for_compaction": "vllm_model_with_compaction at https://hosted.example/v1"}
    real_policy = {**hosted, "policy_model": {"responses_api_models": {"openai_model": {}}}}
    assert list(sweep.mocked_models(real_policy)) == ["policy_model_for_compaction"]


def test_a_sandboxed_server_is_excluded_naming_the_task_images_it_needs_and_their_registry(tmp_path):
    folder = tmp_path / "swe_thing"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "example.jsonl").write_text(
        '{"image_ref": "team/task:one"}\n{"image_ref": "team/task:two"}\n')
    config = {"swe_thing": {"resources_servers": {"swe_thing": {"sandbox_provider": "sandbox"}}}}
    assert sweep.exclusion(folder, config) == ("needs 2 task images from docker.io, which this offline machine cannot "
                                               "reach (rows' image_ref: team/task:one, ...)")
    (folder / "data" / "example.jsonl").write_text('{"q": 1, "agent_ref": {"name": "swe_agent"}}\n')
    assert sweep.exclusion(folder, config) is None  # no image named anywhere: gym-compose's sandboxes serve it


def test_an_inline_providers_own_credentials_are_no_reason(tmp_path):
    folder = tmp_path / "litmus"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "example.jsonl").write_text('{"q": 1, "agent_ref": {"name": "litmus_agent"}}\n')
    config = {"litmus": {"resources_servers": {"litmus": {
        "sandbox_provider": {"opensandbox": {"connection": {"api_key": "k", "domain": "x"}}}}}}}
    assert sweep.exclusion(folder, config) is None


def test_a_sandbox_leased_only_by_a_tool_no_row_offers_needs_no_image_but_one_row_offering_it_does(tmp_path):
    folder = tmp_path / "litmus_agent"
    (folder / "data").mkdir(parents=True)
    plain = {"responses_create_params": {"input": "hi"}, "agent_ref": {"name": "litmus_simple_agent"}}
    (folder / "data" / "example.jsonl").write_text(json.dumps(plain) + "\n")
    config = {"litmus_agent": {"resources_servers": {"litmus_agent": {
        "sandbox_provider": {"opensandbox": {"connection": {"domain": "x"}}}, "sandbox_spec": {"image": "docker.io/library/python:3.12-slim"}}}}}
    assert sweep.exclusion(folder, config) is None
    assert "no example row offers stateful_python_code_exec" in sweep.unleased_sandbox(folder)
    tool = {"type": "function", "name": "stateful_python_code_exec", "parameters": {}}
    offering = {**plain, "responses_create_params": {"input": "hi", "tools": [tool]}}
    (folder / "data" / "example.jsonl").write_text(json.dumps(plain) + "\n" + json.dumps(offering) + "\n")
    assert sweep.unleased_sandbox(folder) is None
    assert "python:3.12-slim" in sweep.exclusion(folder, config)


def test_rows_pinning_images_by_digest_name_the_repository_and_a_local_proof(tmp_path):
    folder = tmp_path / "swebench_pro"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "example.jsonl").write_text('{"image_digest": "sha256:ab"}\n')
    config = {"pro": {"resources_servers": {"swebench_pro": {"sandbox_provider": "sandbox",
                                                             "image_repository": "docker.io/jefzda/sweap-images"}}}}
    why = sweep.exclusion(folder, config) or ""
    assert "a task image from docker.io" in why and "docker.io/jefzda/sweap-images@sha256:ab" in why
    assert "tests/e2e/test_nemo_gym_swe_servers.py" in why


def test_a_placeholder_key_is_no_external_service_but_a_real_one_is(tmp_path):
    folder = tmp_path / "cli_agent"
    folder.mkdir()
    config = {"cli_agent": {"responses_api_agents": {"cli_agent": {"openai_api_key": "EMPTY"}}}}
    assert sweep.exclusion(folder, config) is None  # the built-in mock's policy_api_key
    config["cli_agent"]["responses_api_agents"]["cli_agent"]["openai_api_key"] = "sk-live-123"
    assert sweep.exclusion(folder, config) == "needs an external service (cli_agent.responses_api_agents.cli_agent.openai_api_key)"


def test_the_stacks_own_endpoint_and_nemo_gyms_metadata_are_no_external_service(tmp_path):
    folder = tmp_path / "verifif"
    folder.mkdir()
    judge = {"judge_base_url": "http://policy-model:8000/v1", "judge_api_key": "****"}  # resolve masks the key
    config = {"verifif": {"resources_servers": {"verifif": {**judge, "verified_url": "https://wandb.ai/run"}}},
              "policy_model": {"responses_api_models": {"mock_model": {"mode": "oracle"}}}}
    assert sweep.exclusion(folder, config) is None  # the mock's address, its key, code_gen's provenance link
    config["verifif"]["resources_servers"]["verifif"]["judge_base_url"] = "http://judge.example:8000/v1"
    assert sweep.exclusion(folder, config) == \
        "needs an external service (verifif.resources_servers.verifif.judge_base_url)"


def test_the_key_of_a_direct_provider_mode_not_in_use_is_no_external_service(tmp_path):
    folder = tmp_path / "cline_agent"
    folder.mkdir()
    block = {"model_server": {"type": "responses_api_models", "name": "policy_model"},
             "openai_api_key": "****", "openai_base_url": None}  # cline_agent.yaml: "" shown masked
    config = {"cline_agent": {"responses_api_agents": {"cline_agent": block}}}
    assert sweep.exclusion(folder, config) is None  # its model calls go through its model_server
    block["openai_base_url"] = "https://api.example.com/v1"
    assert sweep.exclusion(folder, config) == \
        "needs an external service (cline_agent.responses_api_agents.cline_agent.openai_api_key)"
    block["openai_base_url"], block["model_server"] = None, None  # calling a provider directly
    assert sweep.exclusion(folder, config) == \
        "needs an external service (cline_agent.responses_api_agents.cline_agent.openai_api_key)"


@pytest.mark.parametrize(("line", "package", "source"), [
    ("human-eval-infilling @ git+https://github.com/w/human-eval-infilling.git",
     "human-eval-infilling", "git+https://github.com/w/human-eval-infilling.git"),
    ("Tale_Suite[x]@git+https://g/t.git@b ; python_version >= '3.12'", "tale-suite", "git+https://g/t.git@b"),
    ("git+https://github.com/microsoft/tale-suite.git@train_test_splits#egg=tale-suite", "tale-suite",
     "git+https://github.com/microsoft/tale-suite.git@train_test_splits#egg=tale-suite"),
    ("https://github.com/e/m/releases/download/en_core_web_sm-3.8.0/en_core_web_sm-3.8.0-py3-none-any.whl",
     "en-core-web-sm", "https://github.com/e/m/releases/download/en_core_web_sm-3.8.0/en_core_web_sm-3.8.0-py3-none-any.whl"),
    ("git+https://github.com/a/verifiable-instructions.git", "verifiable-instructions",
     "git+https://github.com/a/verifiable-instructions.git"),
])
def test_a_requirement_from_git_or_a_url_is_named_by_its_package(line, package, source):
    assert sweep.fetched_package(line) == (package, source)


def test_the_cause_names_each_fetched_requirement_and_what_the_index_holds_under_its_name():
    cause = sweep.fetched_elsewhere("numpy\nhuman-eval-infilling @ git+https://github.com/w/h.git\n")
    assert cause == ("needs the internet at build time: human-eval-infilling from git+https://github.com/w/h.git "
                     "[PyPI's human-eval-infilling 2.15.0 is an empty package of someone else's]")
    assert sweep.fetched_elsewhere("numpy\nrequests>=2\n") is None


def test_a_config_that_does_not_resolve_names_its_fetched_requirements_too(tmp_path):
    (tmp_path / "requirements.txt").write_text("nemo-usersim @ git+https://github.com/N/UserSim.git@abc\n")
    error = "error: interpolation ${policy_base_url} in user_model_base_url has no target"
    cause = sweep.exclusion(tmp_path, None, error)
    assert cause.startswith("needs a real model endpoint (error: interpolation ${policy_base_url}"), cause
    assert cause.endswith("; and needs the internet at build time: nemo-usersim from git+https://github.com/N/UserSim"
                          ".git@abc [PyPI's nemo-usersim 0.0.0a0 is NVIDIA's empty name placeholder]"), cause
    (tmp_path / "requirements.txt").write_text("numpy\n")
    assert sweep.exclusion(tmp_path, None, error).startswith("needs a real model endpoint")
    assert sweep.exclusion(tmp_path, None, "some other error") is None


def test_rows_that_name_no_agent_of_a_server_whose_configs_define_none_are_excluded_naming_its_agents(tmp_path):
    server = tmp_path / "resources_servers" / "graded"
    (server / "data").mkdir(parents=True)
    (server / "data" / "example.jsonl").write_text(json.dumps({"responses_create_params": {"input": []}}) + "\n")
    config = {"graded_resources_server": {"resources_servers": {"graded": {"allowed_agents": ["stirrup_agent"]}}}}
    why = sweep.exclusion(server, config)
    assert why is not None and why.startswith("needs an agent: its rows name none")
    assert "allowed_agents: stirrup_agent" in why
    # the same rows with an agent of the config's own to go to: they run
    with_agent = {**config, "graded_agent": {"responses_api_agents": {"simple_agent": {}}}}
    assert sweep.exclusion(server, with_agent) is None


def test_a_sweep_project_fits_the_length_gym_compose_allows(monkeypatch):
    monkeypatch.delenv("GYM_COMPOSE_SWEEP_PREFIX", raising=False)
    name = sweep.sweep_project("ngsweep", 107, "single_step_tool_use_with_argument_comparison")
    assert name.startswith("ngsweep-107-single-step-tool-use") and len(name) <= MAX_PROJECT
    assert project_too_long(name) is None and not name.endswith("-")
    monkeypatch.setenv("GYM_COMPOSE_SWEEP_PREFIX", "other")
    assert sweep.sweep_project("ngsweep", 3, "mcqa") == "other-3-mcqa"
