"""Plan and render: a merged config becomes a compose project, with no Docker involved."""


import pytest
import yaml

from gym_compose.contract import HEALTHCHECK_SCRIPT
from gym_compose.errors import UserError
from gym_compose.plan.model import HEAD_SERVICE, CollectorRun, StackOptions
from gym_compose.plan.planner import SECRET_PREFIX, plan_stack, service_name
from gym_compose.render.compose import compose_model, write_project
from tests.support.plans import IMAGES, weather_config


def test_service_names_are_dns_safe():
    assert service_name("Weather_Agent") == "weather-agent"
    assert service_name("a.b__c") == "a-b-c"
    long = "single_step_tool_use_with_argument_comparison_environment_server"  # 64 characters
    assert len(service_name(long)) == 49 and service_name(long).startswith("single-step-tool-use-with-")
    assert service_name(long) != service_name(long.replace("environment", "environmenT"))  # more: test_names.py
    with pytest.raises(UserError):
        service_name("___")


def test_one_service_per_instance_plus_head(roots):
    stack = plan_stack(weather_config(), roots)
    names = [s.name for s in stack.services]
    assert names == [HEAD_SERVICE, "weather", "weather-agent", "weather-env", "policy-model"]
    assert stack.service("weather").source_dir == roots[0] / "server_images" / "weather_impl"
    assert stack.service("weather-agent").source_dir is None  # built-in: runs from the base image


def test_in_network_view_uses_service_names_and_host_view_published_addresses(roots):
    stack = plan_stack(weather_config(), roots, StackOptions(publish_all=True, head_port=12000))
    agent = stack.network_config["Weather_Agent"]["responses_api_agents"]["simple_agent"]
    assert (agent["host"], agent["port"]) == ("weather-agent", 8000)
    host_agent = stack.host_config["Weather_Agent"]["responses_api_agents"]["simple_agent"]
    assert host_agent["host"] == "127.0.0.1" and 12000 < host_agent["port"] < 12010
    assert stack.host_config["head_server"] == {"host": "127.0.0.1", "port": 12000}
    assert stack.network_config["head_server"] == {"host": "head", "port": 11000}


def test_secrets_leave_the_config_and_never_reach_compose_yaml(roots, tmp_path):
    stack = plan_stack(weather_config("sk-very-secret"), roots)
    model = stack.network_config["policy_model"]["responses_api_models"]["openai_model"]
    assert model["openai_api_key"].startswith(SECRET_PREFIX)
    assert "sk-very-secret" in stack.secrets.values()
    assert stack.service("policy-model").secrets  # the model server gets its key file
    out = tmp_path / "rendered"
    compose_file = write_project(stack, IMAGES, out)
    text = compose_file.read_text()
    assert "sk-very-secret" not in text
    rendered = yaml.safe_load(text)
    assert set(rendered["secrets"]) == set(stack.secrets)
    for name, value in stack.secrets.items():
        assert (out / "secrets" / name).read_text() == value


def test_rendered_services_have_safe_defaults_healthchecks_and_readiness_order(roots):
    stack = plan_stack(weather_config(), roots)
    model = compose_model(stack, {**IMAGES, "weather": "gym-compose/weather_impl:123"})
    services = model["services"]
    assert services["weather"]["image"] == "gym-compose/weather_impl:123"
    assert services["weather-agent"]["image"] == IMAGES["base"]
    for name, service in services.items():
        assert service["cap_drop"] == ["ALL"]
        assert "no-new-privileges:true" in service["security_opt"]
        assert service["user"] != "root" and not str(service["user"]).startswith("0")
        assert service["labels"]["io.gym-compose.project"] == "gym-compose"
        assert service["healthcheck"]["test"][-1] == ("11000" if name == HEAD_SERVICE else "8000")
    head = services[HEAD_SERVICE]
    assert head["ports"] == ["127.0.0.1:11000:11000"]
    assert "depends_on" not in head  # the head's readiness waits for every server instead
    assert yaml.safe_load(head["environment"]["GYM_COMPOSE_HEAD_VIEW"])["head_server"]["host"] == "127.0.0.1"
    # the model server waits for its upstream too, so its start period covers both timeouts
    assert services["policy-model"]["healthcheck"]["start_period"] == "50s"
    assert services["weather"]["healthcheck"]["start_period"] == "30s"
    assert "ports" not in services["weather"]


def test_the_healthcheck_starts_no_interpreter_and_checks_often_only_until_healthy(roots):
    stack = plan_stack(weather_config(), roots)
    check = compose_model(stack, IMAGES)["services"]["weather"]["healthcheck"]
    assert check["test"][:3] == ["CMD", "/bin/bash", HEALTHCHECK_SCRIPT] and "start_interval" not in check
    assert check["interval"] == "500ms"  # the first check comes early and waits for readiness
    steady, wait = (int(check["test"][check["test"].index(flag) + 1]) for flag in ("--steady", "--wait"))
    assert steady >= 20  # later checks sleep first: one per ~30 s once healthy
    assert steady + wait + 5 <= int(check["timeout"].removesuffix("s"))  # and finish within the timeout


def test_docker_block_overrides_limits_and_publishes(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {"memory": "2g", "pids": 64, "publish": True}
    stack = plan_stack(config, roots)
    service = compose_model(stack, IMAGES)["services"]["weather"]
    assert service["mem_limit"] == "2g" and service["pids_limit"] == 64
    assert service["ports"] == ["127.0.0.1:11001:8000"]


def test_a_nemo_gym_runtime_server_gets_room_for_ray_unless_its_block_says_otherwise(roots):
    config = weather_config()
    impl = config["weather"]["resources_servers"]["weather_impl"]
    impl["docker"] = {"runtime": "nemo_gym"}
    services = compose_model(plan_stack(config, roots), IMAGES)["services"]
    # NeMo Gym starts a Ray cluster in such a server: ~420 pids, far past the lean 256
    assert services["weather"]["pids_limit"] >= 1024 and services["weather"]["mem_limit"] == "2g"
    assert services["weather-env"]["pids_limit"] == 256  # the lean servers keep theirs
    impl["docker"] = {"runtime": "nemo_gym", "memory": "3g", "pids": 500}
    service = compose_model(plan_stack(config, roots), IMAGES)["services"]["weather"]
    assert (service["mem_limit"], service["pids_limit"]) == ("3g", 500)


def test_a_nemo_gym_runtime_server_may_write_into_its_folder_unless_its_block_says_otherwise(roots):
    # NeMo Gym's servers write into their checkout folder (swebench_pro: logs/run_evaluation/)
    config = weather_config()
    impl = config["weather"]["resources_servers"]["weather_impl"]
    impl["docker"] = {"runtime": "nemo_gym"}
    services = compose_model(plan_stack(config, roots), IMAGES)["services"]
    assert services["weather"]["read_only"] is False and services["weather-env"]["read_only"] is True
    impl["docker"] = {"runtime": "nemo_gym", "read_only": True}
    assert compose_model(plan_stack(config, roots), IMAGES)["services"]["weather"]["read_only"] is True


def test_unknown_docker_key_is_a_clear_error(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {"memroy": "2g"}
    with pytest.raises(UserError, match="memroy"):
        plan_stack(config, roots)


def test_missing_implementation_names_instance_and_roots(tmp_path):
    with pytest.raises(UserError) as error:
        plan_stack(weather_config(), [tmp_path])
    assert "weather_impl" in str(error.value) and str(tmp_path) in str(error.value)


def test_collector_mounts_input_read_only_and_results(roots, tmp_path):
    stack = plan_stack(weather_config(), roots)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("{}\n")
    run = CollectorRun(input_file=rows, output_dir=tmp_path / "out", args=["--limit", "2"])
    collector = compose_model(stack, IMAGES, run)["services"]["collector"]
    assert collector["profiles"] == ["collect"]
    mounts = {m["target"]: m for m in collector["volumes"]}
    assert mounts["/input/rows.jsonl"]["read_only"] is True
    assert mounts["/results"]["source"] == str((tmp_path / "out").resolve())
    assert collector["command"][-2:] == ["--limit", "2"]
    assert collector["depends_on"] == {HEAD_SERVICE: {"condition": "service_healthy"}}


def test_numeric_secrets_are_extracted_and_unmounted_ones_are_not_written(roots):
    config = weather_config(api_key=12345)  # an override such as ++policy_api_key=12345 parses as int
    stack = plan_stack(config, roots)
    model = stack.network_config["policy_model"]["responses_api_models"]["openai_model"]
    assert model["openai_api_key"].startswith(SECRET_PREFIX)
    assert stack.network_config["policy_api_key"].startswith(SECRET_PREFIX)
    assert list(stack.secrets.values()) == ["12345"]  # the top-level copy is mounted by no one


def test_secret_paths_that_read_alike_get_different_files(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["a b"] = {"api_key": "one"}
    config["weather"]["resources_servers"]["weather_impl"]["a_b"] = {"api_key": "two"}
    stack = plan_stack(config, roots)
    assert {"one", "two"} <= set(stack.secrets.values())


def test_secrets_in_docker_environment_are_refused(roots):
    config = weather_config()
    config["weather"]["resources_servers"]["weather_impl"]["docker"] = {"environment": {"OPENAI_API_KEY": "sk-x"}}
    with pytest.raises(UserError, match="OPENAI_API_KEY"):
        plan_stack(config, roots)


@pytest.mark.parametrize("value", ["abc", -1, True])
def test_timeouts_must_be_seconds(roots, value):
    config = {**weather_config(), "server_spinup_timeout_seconds": value}
    with pytest.raises(UserError, match="server_spinup_timeout_seconds"):
        plan_stack(config, roots)


def test_templates_are_parsed_once_and_each_caller_gets_its_own_copy():
    """load_template caches the parse (libyaml when present): the same data as PyYAML's own
    parser, and a caller that changes its copy changes no one else's."""
    import yaml

    from gym_compose.render.templates import TEMPLATES_DIR, load_template

    for path in sorted(TEMPLATES_DIR.glob("*.yaml")):
        assert load_template(path.stem) == (yaml.safe_load(path.read_text()) or {})
    first = load_template("server")
    first["healthcheck"]["interval"] = "changed"
    assert load_template("server")["healthcheck"]["interval"] != "changed"
