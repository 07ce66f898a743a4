"""The NeMo Gym agent sweep (bench/bench_nemo_gym_agents.py): which rows and config each agent is
paired with, and why an agent is excluded before anything runs."""

import json
from pathlib import Path

from bench import bench_nemo_gym_agents as agents


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def resources_server(tree: Path, name: str, flavors: dict[str, str], rows: bool = True) -> None:
    for flavor, agent in flavors.items():
        write(tree / "resources_servers" / name / "configs" / f"{flavor}.yaml",
              f"{flavor}_rs:\n  resources_servers:\n    {name}: {{entrypoint: app.py}}\n"
              f"{flavor}_agent:\n  responses_api_agents:\n    {agent}:\n      entrypoint: app.py\n")
    if rows:
        write(tree / "resources_servers" / name / "data" / "example.jsonl",
              json.dumps({"responses_create_params": {"input": "hi"}}) + "\n")


def agent(tree: Path, name: str, requirements: str = "", configs: dict[str, str] | None = None) -> Path:
    folder = tree / "responses_api_agents" / name
    write(folder / "app.py", "")
    write(folder / "requirements.txt", requirements)
    for stem, instance in (configs or {}).items():
        write(folder / "configs" / f"{stem}.yaml",
              f"{instance}:\n  responses_api_agents:\n    {name}:\n      entrypoint: app.py\n"
              "      resources_server:\n        type: resources_servers\n        name: ???\n")
    return folder


def test_a_server_config_that_instantiates_the_agent_comes_first_its_own_flavor_before_others(tmp_path):
    resources_server(tmp_path, "wordle", {"wordle_hard": "gymnasium_agent", "wordle": "gymnasium_agent"})
    resources_server(tmp_path, "blank", {"blank": "gymnasium_agent"}, rows=False)  # no rows: no pairing
    resources_server(tmp_path, agents.GENERIC_SERVER, {agents.GENERIC_SERVER: "simple_agent"})
    agent(tmp_path, "gymnasium_agent", configs={"gymnasium_agent": "gymnasium_agent"})
    found = agents.pairings(tmp_path, "gymnasium_agent")
    assert [pairing.source for pairing in found] == [
        "resources_servers/wordle/configs/wordle.yaml", "resources_servers/wordle/configs/wordle_hard.yaml",
        "responses_api_agents/gymnasium_agent/configs/gymnasium_agent.yaml"]
    assert found[0].arguments == ("--resources-server", "wordle", "++agent_name=wordle_agent")
    assert found[1].arguments[:2] == ("--resources-server", "wordle/wordle_hard")
    assert found[0].rows == tmp_path / "resources_servers/wordle/data/example.jsonl"


def test_an_agent_no_server_uses_runs_its_own_config_against_the_generic_server_with_known_settings(tmp_path):
    resources_server(tmp_path, agents.GENERIC_SERVER, {agents.GENERIC_SERVER: "simple_agent"})
    agent(tmp_path, "langgraph_agent", configs={"langgraph_agent": "langgraph_agent", "rewoo": "rewoo_agent"})
    own, flavor = agents.pairings(tmp_path, "langgraph_agent")
    block = "++langgraph_agent.responses_api_agents.langgraph_agent"
    assert own.arguments == ("--resources-server", agents.GENERIC_SERVER, "--agent-type", "langgraph_agent",
                             "++agent_name=langgraph_agent", f"{block}.resources_server.name={agents.GENERIC_SERVER}",
                             f"{block}.entrypoint=reflection_agent.py")
    assert flavor.arguments[3] == "langgraph_agent/rewoo" and flavor.instance == "rewoo_agent"
    assert own.server == agents.GENERIC_SERVER
    assert own.rows == tmp_path / "resources_servers" / agents.GENERIC_SERVER / "data/example.jsonl"


def test_an_agent_that_ships_example_rows_runs_its_own_config_on_them(tmp_path):
    resources_server(tmp_path, agents.GENERIC_SERVER, {agents.GENERIC_SERVER: "simple_agent"})
    folder = agent(tmp_path, "mini_swe_agent_2", configs={"mini_swe_agent_2": "mini_swe_agent_2"})
    write(folder / "data" / "example.jsonl", json.dumps({"instance_id": "django__django-10973"}) + "\n")
    (own,) = agents.pairings(tmp_path, "mini_swe_agent_2")
    assert own.rows == folder / "data" / "example.jsonl"
    assert own.server == agents.GENERIC_SERVER


def test_the_wheels_config_of_a_model_the_agents_config_names_without_defining_it_comes_along(tmp_path):
    resources_server(tmp_path, agents.GENERIC_SERVER, {agents.GENERIC_SERVER: "simple_agent"})
    folder = agent(tmp_path, "compacting_agent")
    write(folder / "configs" / "compacting_agent.yaml",
          "compacting_agent:\n  responses_api_agents:\n    compacting_agent:\n      entrypoint: app.py\n"
          "      model_server:\n        type: responses_api_models\n        name: policy_model_for_compaction\n"
          "      judge:\n        type: responses_api_models\n        name: policy_model\n")
    model_config = write(tmp_path / "responses_api_models" / "compaction_model" / "configs" / "for_compaction.yaml",
                         "policy_model_for_compaction:\n  responses_api_models:\n    compaction_model: {}\n")
    write(tmp_path / "responses_api_models" / "hosted" / "configs" / "hosted.yaml",  # the stack's policy stays ours
          "policy_model:\n  responses_api_models:\n    hosted: {}\n")
    (own,) = agents.pairings(tmp_path, "compacting_agent")
    assert own.arguments[-2:] == ("--config", str(model_config))
    assert own.arguments.count("--config") == 1


def test_an_agent_whose_requirements_come_from_git_or_pull_a_gpu_stack_is_excluded_naming_the_line(tmp_path):
    from_git = agent(tmp_path, "tau2", "rank-bm25>=0.2.2\ntau2[knowledge] @ git+https://github.com/x/tau2-bench@main\n")
    assert agents.agent_exclusion(from_git) == ("needs the internet at build time: tau2 from "
                                                "git+https://github.com/x/tau2-bench@main "
                                                "[PyPI's tau2 is another project (magnetic relaxation rates)]")
    gpu = agent(tmp_path, "trainer_agent", "vllm==0.11\n")
    assert "GPU" in (agents.agent_exclusion(gpu) or "")
    assert agents.agent_exclusion(agent(tmp_path, "plain_agent", "jsonschema\n")) is None


def test_values_left_open_are_named_key_by_key():
    stderr = ("error: 2 required value(s) are unset ('???') after merging; give each one, e.g. on the command line:\n"
              "  ++remote_agent.responses_api_agents.remote_agent.agent_base_url=<value>    (set to ??? in x.yaml)\n"
              "  ++remote_agent.responses_api_agents.remote_agent.token=<value>    (set to ??? in x.yaml)\n"
              "  hint: or set them in env.yaml\n")
    assert agents.resolve_error(stderr) == (
        "leaves remote_agent.responses_api_agents.remote_agent.agent_base_url, "
        "remote_agent.responses_api_agents.remote_agent.token open (`???`: a value to supply)")
    assert agents.resolve_error("error: something else\n  hint: h\n") == "error: something else"


def test_the_report_keeps_each_agents_latest_result(tmp_path):
    first = write(tmp_path / "a.jsonl", json.dumps({"agent": "a", "ok": 0}) + "\n" + json.dumps({"agent": "b", "ok": 1}) + "\n")
    again = write(tmp_path / "b.jsonl", json.dumps({"agent": "a", "ok": 3}) + "\n")
    assert agents.latest_results([first, again], "agent") == [{"agent": "a", "ok": 3}, {"agent": "b", "ok": 1}]


def test_a_server_that_stopped_during_start_up_is_reported_by_the_exception_its_log_ends_on():
    output = ("starting 6 services of project 'x' ...\n"
              "error: critpt-agent stopped during start-up:\n"
              "  - critpt-agent: exited, exit code 1; last log lines:\n"
              "      Traceback (most recent call last):\n"
              '        File "/srv/gym/app.py", line 69, in model_post_init\n'
              "          prompt_yaml = yaml.safe_load(path.read_text())\n"
              "      FileNotFoundError: [Errno 2] No such file or directory: 'turn2.yaml'\n")
    assert agents.start_up_cause(output) == ("error: critpt-agent stopped during start-up: FileNotFoundError: "
                                             "[Errno 2] No such file or directory: 'turn2.yaml'")
    assert agents.start_up_cause("all 6 services healthy\n") is None


def test_an_agent_whose_servers_are_all_excluded_is_not_tried_on_other_rows(tmp_path, monkeypatch):
    resources_server(tmp_path, "aviary", {"aviary": "aviary_agent"})
    resources_server(tmp_path, agents.GENERIC_SERVER, {agents.GENERIC_SERVER: "simple_agent"})
    folder = agent(tmp_path, "aviary_agent", configs={"aviary_agent": "aviary_agent"})
    tried: list[str] = []

    def resolve(tree, pairing, cwd):
        tried.append(pairing.source)
        return {"resolved": pairing.server}, "nemo_gym", ""

    monkeypatch.setattr(agents, "resolve", resolve)
    monkeypatch.setattr(agents, "exclusion", lambda server_dir, config, error: (
        "needs the internet at build time" if server_dir.name == "aviary" else None))
    pairing, why, skipped = agents.plan(tmp_path, folder)
    assert pairing is None and tried == ["resources_servers/aviary/configs/aviary.yaml"]
    assert why == "resources_servers/aviary/configs/aviary.yaml: needs the internet at build time"
    # an agent no server's config runs is still tried on the generic server's rows
    other = agent(tmp_path, "lone_agent", configs={"lone_agent": "lone_agent"})
    pairing, why, _ = agents.plan(tmp_path, other)
    assert why is None and pairing is not None and pairing.server == agents.GENERIC_SERVER


def test_a_harness_agent_that_downloads_node_when_it_starts_is_excluded_naming_its_setup(tmp_path):
    folder = agent(tmp_path, "cli_agent")
    write(folder / "setup_cli.py", 'NODE = f"https://nodejs.org/dist/v{VERSION}/node-v{VERSION}-linux-x64.tar.xz"\n'
                                   'INSTALL = "https://example.org/cli/install.sh"\n')
    why = agents.agent_exclusion(folder)
    assert why is not None and why.startswith("needs the internet at run time: it downloads Node.js")
    assert "(setup_cli.py, and runs https://example.org/cli/install.sh)" in why
    assert agents.agent_exclusion(agent(tmp_path, "plain_agent")) is None
