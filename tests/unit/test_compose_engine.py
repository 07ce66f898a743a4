"""The compose project against a stand-in `docker` that replays the engine's answers.

The stand-in is a shell script: each call is logged to `calls`, and what it prints comes from the
case statement each test writes, keyed on the command words.
"""

from __future__ import annotations

import json

import pytest

from gym_compose.engine import docker_cli
from gym_compose.engine.targets.compose_project import NETWORK_DETACH_WAIT_S, STRAGGLER_SETTLE_S, ComposeProject
from gym_compose.engine.targets.postmortem import describe_exit
from gym_compose.errors import EngineFailure
from tests.fakes.clock import FakeClock
from tests.support.fake_docker_cli import install_fake_docker


@pytest.fixture
def engine(tmp_path, monkeypatch):
    return install_fake_docker(tmp_path, monkeypatch)


def ps_row(service: str, state: str, exit_code: int = 0, one_off: bool = False, health: str = "") -> str:
    return json.dumps({"Service": service, "Name": f"p-{service}-1", "State": state, "Health": health,
                       "ExitCode": exit_code, "Publishers": [],
                       "Labels": f"com.docker.compose.oneoff={'True' if one_off else 'False'},x=y"})


def test_down_removes_the_collector_compose_leaves_behind_and_reports_what_was_there(engine, tmp_path):
    gone = tmp_path / "gone"
    calls = engine(f"""
*"ps -a --filter label=com.docker.compose.project=p --filter label=com.docker.compose.oneoff=True"*)
  [ -e {gone} ] || echo p-collector-run-1 ;;
"rm --force p-collector-run-1") touch {gone} ;;
*"ps -a --filter label=io.gym-compose.project=p"*) [ -e {gone} ] || echo p-collector-run-1 ;;
*"network ls --filter label=io.gym-compose.project=p"*) [ -e {gone} ] || echo p_gym ;;
""")
    removed = ComposeProject("p").down()
    assert removed.containers == ["p-collector-run-1"] and removed.networks == ["p_gym"]
    made = calls()
    assert made.index("rm --force p-collector-run-1") < next(i for i, c in enumerate(made) if " down " in f" {c} ")


def test_down_that_leaves_something_behind_fails_naming_it(engine):
    engine("""
*"network ls --filter label=com.docker.compose.project=p"*) echo p_gym ;;
"network rm p_gym") echo "Error response from daemon: error while removing network: network p_gym has active endpoints" >&2; exit 1 ;;
""")
    clock = FakeClock()
    with pytest.raises(EngineFailure, match="not fully removed; still there: networks p_gym"):
        ComposeProject("p", clock=clock).down()
    assert clock.now >= NETWORK_DETACH_WAIT_S  # asked again for the engine's detach time, then gave up


def test_down_warns_of_a_network_the_engine_keeps_an_endpoint_on_with_no_container_and_succeeds(engine, capsys):
    engine("""
*"network ls --filter label=com.docker.compose.project=p"*) echo p_gym ;;
"network rm p_gym") echo "Error response from daemon: error while removing network: network p_gym id 71 has active endpoints" >&2; exit 1 ;;
*"network inspect --format {{json .Containers}} p_gym") echo '{}' ;;
""")
    ComposeProject("p", clock=FakeClock()).down()
    said = capsys.readouterr()
    assert "network(s) p_gym of project 'p' could not be removed" in said.out + said.err
    assert "Docker Engine bug" in said.out + said.err


def test_down_asks_again_while_a_removed_containers_endpoint_is_still_detaching(engine, tmp_path):
    tries = tmp_path / "tries"
    calls = engine(f"""
*"network ls --filter label=io.gym-compose.project=p"*) [ "$(cat {tries} 2>/dev/null)" = xxx ] || echo p_sbx ;;
"network rm p_sbx") echo -n x >> {tries}; [ "$(cat {tries})" = xxx ] && exit 0
  echo "Error response from daemon: error while removing network: network p_sbx id 8b88 has active endpoints" >&2; exit 1 ;;
""")
    clock = FakeClock()
    ComposeProject("p", clock=clock).down()
    assert calls().count("network rm p_sbx") == 3 and clock.now == 1.0


def test_down_disconnects_an_endpoint_the_engine_kept_for_a_removed_container_instead_of_giving_up(engine, tmp_path):
    freed = tmp_path / "freed"
    calls = engine(f"""
*"network ls --filter label=io.gym-compose.project=p"*) [ -e {freed} ] || echo p_sbx ;;
"network rm p_sbx") [ -e {freed} ] && exit 0
  echo "Error response from daemon: error while removing network: network p_sbx id 8b88 has active endpoints" >&2; exit 1 ;;
*"network inspect --format {{{{json .Containers}}}} p_sbx") echo '{{"4f1e":{{"Name":"p-sbx-1","EndpointID":"e1"}},"77aa":{{"Name":"p-user-attached"}}}}' ;;
*"inspect --type container --format {{{{.Id}}}} 4f1e") echo "Error: No such container: 4f1e" >&2; exit 1 ;;
*"inspect --type container --format {{{{.Id}}}} 77aa") echo 77aa ;;
"network disconnect --force p_sbx p-sbx-1") touch {freed} ;;
""")
    clock = FakeClock()
    ComposeProject("p", clock=clock).down()
    made = calls()
    assert "network disconnect --force p_sbx p-sbx-1" in made and clock.now == 0  # no waiting for the engine
    assert not any("p-user-attached" in call for call in made)  # a container that exists is not cut off


def test_down_of_a_sandboxed_stack_removes_a_sandbox_the_stopped_broker_was_still_creating(engine, tmp_path):
    # the listing: the broker before; nothing right after compose down; then the sandbox whose create
    # the engine finished late (a warm-pool refill), until it is removed
    seen, gone = tmp_path / "seen", tmp_path / "gone"
    calls = engine(f"""
*"ps -a --filter label=io.gym-compose.project=p"*) echo -n x >> {seen}
  case "$(cat {seen})" in x) echo p-sandbox-broker-1 ;; xx) ;; *) [ -e {gone} ] || echo p-late-sandbox ;; esac ;;
"rm --force --volumes p-late-sandbox") touch {gone} ;;
""")
    clock = FakeClock()
    ComposeProject("p", clock=clock).down()
    assert "rm --force --volumes p-late-sandbox" in calls() and clock.now == STRAGGLER_SETTLE_S


def test_down_of_a_stack_without_a_broker_does_not_wait(engine):
    engine("")
    clock = FakeClock()
    ComposeProject("p", clock=clock).down()
    assert clock.now == 0


def test_check_stack_names_dead_missing_and_paused_servers_and_ignores_the_collector(engine):
    rows = "\n".join([ps_row("head", "running", health="healthy"), ps_row("model", "exited", 137),
                      ps_row("agent", "paused"), ps_row("collector", "exited", 1, one_off=True)])
    listed = "\n".join(["p-head-1\trunning\tUp 3 seconds (healthy)\thead\tFalse\tlean",
                        "p-model-1\texited\tExited (137) 2 seconds ago\tmodel\tFalse\tlean",
                        "p-agent-1\tpaused\tUp 5 seconds (Paused)\tagent\tFalse\tlean",
                        "p-collector-run-1\texited\tExited (1) 1 second ago\tcollector\tTrue\t"])
    engine(f"""*" ps --all --format json"*) cat <<'EOF'\n{rows}\nEOF\n ;;
"ps --all --no-trunc --filter label=com.docker.compose.project=p "*) cat <<'EOF'\n{listed}\nEOF\n ;;""")
    check = ComposeProject("p").check_stack(["head", "model", "agent", "resources"])
    assert [(s.service, s.state) for s in check.dead] == [("model", "exited"), ("resources", "missing")]
    assert check.paused == ["agent"] and not check.empty


def test_one_docker_ps_lists_the_services_as_compose_ps_would_with_their_published_ports(engine):
    """`up`'s table, the checks before a run and the waits read `docker ps`, not `compose ps`."""
    listed = "\n".join(["p-model-1\trunning\tUp 3 seconds (healthy)\tmodel\tFalse\tlean\t8000/tcp",
                        "p-head-1\trunning\tUp 4 seconds (healthy)\thead\tFalse\tlean\t"
                        "127.0.0.1:11000->11000/tcp, :::11000->11000/tcp",
                        "p-agent-1\trunning\tUp 3 seconds (health: starting)\tagent\tFalse\tlean\t"
                        "0.0.0.0:9000-9001->9000-9001/tcp"])
    calls = engine(f"""*"ps --all --no-trunc --filter label=com.docker.compose.project=p "*)
  cat <<'EOF'\n{listed}\nEOF\n ;;""")
    states = ComposeProject("p").quick_states()
    assert [(s.service, s.health, s.published) for s in states] == [
        ("agent", "starting", ["0.0.0.0:9000", "0.0.0.0:9001"]),
        ("head", "healthy", ["127.0.0.1:11000", ":::11000"]),
        ("model", "healthy", []),
    ]
    assert len(calls()) == 1 and " compose " not in f" {calls()[0]} "


def test_a_death_names_exit_code_and_whether_memory_ran_out():
    assert describe_exit("policy-model", 137, oom_killed=True).startswith(
        "server policy-model exited (exit code 137, OOM-killed")
    assert describe_exit("agent", 137, oom_killed=False) == "server agent exited (exit code 137, killed (SIGKILL), not out of memory)"
    assert describe_exit("agent", 1, oom_killed=False) == "server agent exited (exit code 1, not OOM-killed)"
    assert "removed" in describe_exit("agent", None, oom_killed=False)


def test_a_long_running_docker_process_explains_a_dead_engine_after_it_exits(engine):
    engine('''*"logs"*) echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1 ;;''')
    logs = ComposeProject("p").follow_logs([], follow=True, tail="0")
    assert logs.wait(30) == 1
    with pytest.raises(docker_cli.DockerUnavailable, match="Docker engine is not running"):
        logs.check(engine_only=True)


def test_a_one_off_run_reads_its_lease_from_our_pipe(engine, tmp_path):
    got = tmp_path / "stdin"
    engine(f'''*"run --rm --no-TTY"*) cat > {got} ;;''')
    with open(tmp_path / "log", "w") as log:
        run = ComposeProject("p").run_one_off("collector", log)
        run.tell({"stop": "server x exited"})
        run.close_stdin()
        assert run.wait(30) == 0
    assert json.loads(got.read_text()) == {"stop": "server x exited"}


def test_a_missing_docker_cli_is_explained_for_long_running_calls_too(monkeypatch, tmp_path):
    monkeypatch.setattr(docker_cli, "DOCKER", str(tmp_path / "no-docker"))
    with pytest.raises(docker_cli.DockerUnavailable, match="`docker` command was not found"):
        ComposeProject("p").follow_logs([], follow=False, tail=None)


def test_sandboxes_the_engine_is_removing_already_are_waited_for_not_removed_twice(engine, tmp_path):
    from gym_compose.engine.targets.sandbox_containers import remove_sandboxes

    listed = tmp_path / "listed"
    calls = engine(f"""
*"--filter label=io.gym-compose.sandbox --format"*) echo -n x >> {listed}
  [ "$(cat {listed})" = x ] && printf 'a1 running\\nb2 removing\\n' || true ;;
""")
    assert remove_sandboxes("p") == 2
    made = calls()
    assert "rm --force --volumes a1" in made and not any("b2" in call for call in made)
    assert open(listed).read() == "xx"  # listed again until the one being removed was gone
