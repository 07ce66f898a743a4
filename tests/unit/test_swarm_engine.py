"""The swarm target against a stand-in `docker` that replays Swarm's answers (recorded on Docker
20.10 with `docker service ls/ps --format '{{json .}}'`), and the registry push."""

from __future__ import annotations

import json

import pytest

from gym_compose.engine.images.image_registry import copy_images, push_images, registry_name
from gym_compose.engine.targets.swarm_stack import SwarmStack
from gym_compose.errors import EngineFailure
from tests.support.fake_docker_cli import install_fake_docker

SERVICES = [
    {"ID": "9d1", "Mode": "replicated", "Name": "p_head", "Ports": "*:11000->11000/tcp", "Replicas": "1/1"},
    {"ID": "9d2", "Mode": "replicated", "Name": "p_counter", "Ports": "", "Replicas": "1/2"},
    {"ID": "9d3", "Mode": "replicated job", "Name": "p_collector", "Ports": "", "Replicas": "0/1 (1/1 completed)"},
]
TASKS = [
    {"CurrentState": "Running 5 seconds ago", "DesiredState": "Running", "Error": "", "Name": "p_head.1"},
    {"CurrentState": "Running 4 seconds ago", "DesiredState": "Running", "Error": "", "Name": "p_counter.1"},
    {"CurrentState": "Failed 2 seconds ago", "DesiredState": "Shutdown", "Error": "\"task: non-zero exit (137)\"",
     "Name": "p_counter.2"},
    {"CurrentState": "Starting 1 second ago", "DesiredState": "Running", "Error": "", "Name": "\\_ p_counter.2"},
    {"CurrentState": "Complete 1 second ago", "DesiredState": "Shutdown", "Error": "",
     "Name": "p_collector.m3qdon1ovmacu3iouyy7g5ria"},
]


@pytest.fixture
def engine(tmp_path, monkeypatch):
    return install_fake_docker(tmp_path, monkeypatch)


def test_tasks_become_service_states(engine, tmp_path):
    for name, rows in (("services", SERVICES), ("tasks", TASKS)):
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    engine(f'"service ls"*) cat {tmp_path}/services ;;\n"service ps"*) cat {tmp_path}/tasks ;;')
    states = SwarmStack("p").ps()
    by_task = {s.container: s for s in states}
    assert set(by_task) == {"p_head.1", "p_counter.1", "p_counter.2", "p_collector.m3qdon1ovmacu3iouyy7g5ria"}
    assert by_task["p_head.1"].serving and by_task["p_head.1"].published == ["0.0.0.0:11000"]
    dead = by_task["p_counter.2"]  # its earlier task's line (`\_`) is not a state of its own
    assert (dead.service, dead.state, dead.exit_code, dead.serving) == ("counter", "exited", 137, False)
    job = by_task["p_collector.m3qdon1ovmacu3iouyy7g5ria"]
    assert job.one_off and job.state == "exited" and job.exit_code == 0
    # a replica that died counts as dead even though another replica of its service runs
    check = SwarmStack("p").check_stack(["head", "counter"])
    assert [s.container for s in check.dead] == ["p_counter.2"]
    assert SwarmStack("p").one_off_containers("collector") == ["p_collector"]


def test_registry_names_and_push_by_digest(engine):
    assert registry_name("gym-compose/base:abc", "reg.example:5000/gym") == "reg.example:5000/gym/base:abc"
    calls = engine('"image inspect"*) echo "reg.example/gym/base@sha256:1111" ;;')
    pushed = push_images({"base": "gym-compose/base:abc", "head": "gym-compose/base:abc"}, "reg.example/gym")
    assert pushed == {"base": "reg.example/gym/base@sha256:1111", "head": "reg.example/gym/base@sha256:1111"}
    assert [c.split()[0] for c in calls()] == ["tag", "push", "image"]  # one image, pushed once


def test_a_failed_push_names_the_registry(engine):
    engine('push*) echo "connection refused" >&2; exit 1 ;;')
    with pytest.raises(EngineFailure, match="could not push reg.example/gym/base:abc") as error:
        push_images({"base": "gym-compose/base:abc"}, "reg.example/gym")
    assert "docker login" in str(error.value.hint)


def test_images_are_copied_only_into_node_engines_that_lack_them(engine):
    # n1 holds base with this id and lacks the server image; n2 holds base under another id
    calls = engine("""
"image inspect gym-compose/base:abc") echo '[{"Id": "sha256:b"}]' ;;
"image inspect gym-compose/srv:def") echo '[{"Id": "sha256:s"}]' ;;
"-H unix:///n1.sock image inspect --format {{.Id}} gym-compose/base:abc") echo sha256:b ;;
"-H unix:///n2.sock image inspect --format {{.Id}} gym-compose/base:abc") echo sha256:old ;;
"-H unix:///n2.sock image inspect --format {{.Id}} gym-compose/srv:def") echo sha256:s ;;
"-H "*"image inspect"*) echo "Error: No such image: x" >&2; exit 1 ;;""")
    said: list[str] = []
    copy_images({"base": "gym-compose/base:abc", "srv": "gym-compose/srv:def", "head": "gym-compose/base:abc"},
                ["unix:///n1.sock", "unix:///n2.sock"], progress=said.append)
    saves = [c for c in calls() if c.startswith("save")]
    loads = [c.split(" load")[0] for c in calls() if " load " in c]
    assert len(saves) == 1 and saves[0].endswith("gym-compose/base:abc gym-compose/srv:def")
    assert sorted(loads) == ["-H unix:///n1.sock", "-H unix:///n2.sock"]
    assert any("unix:///n1.sock: loaded gym-compose/srv:def" in line for line in said)
    assert any("unix:///n2.sock: loaded gym-compose/base:abc" in line for line in said)


def test_the_node_engines_load_the_images_at_the_same_time_and_a_failed_load_names_its_engine(engine, tmp_path):
    # each load waits (bounded) until the other one has begun: loads one after another never get there
    calls = engine(f"""
"image inspect gym-compose/base:abc") echo '[{{"Id": "sha256:b"}}]' ;;
"-H "*"image inspect"*) echo "Error: No such image: x" >&2; exit 1 ;;
"save "*) ;;
"-H unix:///n1.sock load"*) touch {tmp_path}/n1; for i in $(seq 100); do [ -f {tmp_path}/n2 ] && exit 0; sleep 0.05; done; exit 1 ;;
"-H unix:///n2.sock load"*) touch {tmp_path}/n2; for i in $(seq 100); do [ -f {tmp_path}/n1 ] && break; sleep 0.05; done
                            echo "no space left on device" >&2; exit 1 ;;""")
    with pytest.raises(EngineFailure, match="could not load the images into unix:///n2.sock") as error:
        copy_images({"base": "gym-compose/base:abc"}, ["unix:///n1.sock", "unix:///n2.sock"])
    assert "no space left on device" in str(error.value)
    assert len([c for c in calls() if " load " in c]) == 2


def test_nothing_is_saved_when_every_node_engine_holds_the_images(engine):
    calls = engine("""
"image inspect gym-compose/base:abc") echo '[{"Id": "sha256:b"}]' ;;
*"image inspect --format {{.Id}} gym-compose/base:abc") echo sha256:b ;;""")
    copy_images({"base": "gym-compose/base:abc"}, ["ssh://admin@node2"])
    assert not [c for c in calls() if c.startswith("save") or " load " in c]


def test_an_unreachable_node_engine_is_named(engine):
    engine("""
"image inspect"*) echo '[{"Id": "sha256:b"}]' ;;
"-H "*) echo "Cannot connect to the Docker daemon at tcp://node9:2376. Is the docker daemon running?" >&2; exit 1 ;;""")
    with pytest.raises(EngineFailure, match="tcp://node9:2376") as error:
        copy_images({"base": "gym-compose/base:abc"}, ["tcp://node9:2376"])
    assert "docker -H ENGINE info" in str(error.value.hint)


def test_up_refuses_an_engine_that_is_not_a_swarm_manager(engine):
    from gym_compose.engine.targets.swarm_stack import require_swarm

    engine('info*) echo inactive ;;')
    with pytest.raises(EngineFailure, match="not a swarm manager") as error:
        require_swarm()
    assert "docker swarm init" in str(error.value.hint)



def test_a_lost_nodes_tasks_read_as_being_replaced_and_extra_running_counts_as_up(engine, tmp_path, monkeypatch):
    """Recorded after a worker node was killed: the lost task still reads `Running` (desired
    Shutdown), its slot's new task is `Pending`, and `service ls` counts both (2/1)."""
    services = [{"ID": "9d4", "Mode": "replicated", "Name": "p_model", "Ports": "", "Replicas": "2/1"}]
    tasks = [{"CurrentState": "Pending 1 second ago", "DesiredState": "Running", "Error": "", "Name": "p_model.1",
              "Node": ""},
             {"CurrentState": "Running 2 minutes ago", "DesiredState": "Shutdown", "Error": "",
              "Name": "\\_ p_model.1", "Node": "gymnode1"}]
    for name, rows in (("services", services), ("tasks", tasks)):
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    engine(f'"service ls"*) cat {tmp_path}/services ;;\n"service ps"*) cat {tmp_path}/tasks ;;\n'
           '"service logs"*) sleep 30 ;;')
    monkeypatch.setattr("gym_compose.engine.targets.swarm_stack.LOG_TAIL_TIMEOUT_SECONDS", 1)
    stack = SwarmStack("p")
    assert stack._all_replicas_up()  # 2 running of 1 wanted: not waiting forever for a lost node
    (dead,) = stack.check_stack(["model"]).dead
    assert dead.state == "created"
    assert "Swarm is starting it again" in stack.describe_death(dead)
    assert "is the node that ran it gone" in stack.log_tail("model")[0]


def test_a_task_lost_with_its_node_is_dead_even_when_its_replacement_already_runs(engine, tmp_path):
    """The race the swarm-nodes scenario hit: Swarm replaced the killed node's tasks before the
    run's next look, so every slot read `Running`; the requests in flight to the lost tasks would
    have waited for the request timeout (an hour)."""
    services = [{"ID": "9d4", "Mode": "replicated", "Name": "p_model", "Ports": "", "Replicas": "3/2"}]
    tasks = [{"ID": "new1", "CurrentState": "Running 3 seconds ago", "DesiredState": "Running", "Error": "",
              "Name": "p_model.1", "Node": "vm"},
             {"ID": "old1", "CurrentState": "Running 2 minutes ago", "DesiredState": "Shutdown", "Error": "",
              "Name": "\\_ p_model.1", "Node": "gymnode2"},
             {"ID": "old2", "CurrentState": "Running 1 second ago", "DesiredState": "Shutdown", "Error": "",
              "Name": "p_model.2", "Node": "gymnode1"}]  # being stopped on a node that is up: not lost
    nodes = [{"Hostname": "vm", "Status": "Ready"}, {"Hostname": "gymnode1", "Status": "Ready"},
             {"Hostname": "gymnode2", "Status": "Down"}]
    for name, rows in (("services", services), ("tasks", tasks), ("nodes", nodes)):
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    engine(f'"service ls"*) cat {tmp_path}/services ;;\n"service ps"*) cat {tmp_path}/tasks ;;\n'
           f'"node ls"*) cat {tmp_path}/nodes ;;')
    stack = SwarmStack("p")
    check = stack.check_stack(["model"])
    lost = [state for state in check.dead if state.state == "lost"]
    assert [(s.service, s.container, s.node) for s in lost] == [("model", "p_model.1.old1", "gymnode2")]
    assert "lost with node gymnode2, which is down" in stack.describe_death(lost[0])
    # a watch that began after the loss (a --resume) is not stopped by it
    assert not [s for s in check.since(check.lost).dead if s.state == "lost"]
