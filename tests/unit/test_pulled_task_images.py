"""`down --images`: the task images a project's broker pulled, read from its log, and their removal
(against a stand-in `docker`)."""

from __future__ import annotations

import re

import pytest

from gym_compose.contract import BROKER_PULLED_LINE, BROKER_PULLED_PATTERN
from gym_compose.engine.targets.sandbox_containers import pulled_task_images, remove_task_images
from tests.support.fake_docker_cli import install_fake_docker

BROKER_LOG = """\
2026-12-02 10:00:01,000 INFO gym_compose.sandbox.broker: pulling 127.0.0.1:5000/swe/sweap-images:a (not on the engine yet)
2026-12-02 10:00:02,000 INFO gym_compose.sandbox.broker: pulling 127.0.0.1:5000/swe/sweap-images:a: 0.01 of 0.07 GB
2026-12-02 10:00:03,000 INFO gym_compose.sandbox.broker: pulled 127.0.0.1:5000/swe/sweap-images:a in 1.9 s
2026-12-02 10:00:04,000 INFO gym_compose.sandbox.broker: pulled registry.example/swe@sha256:abc in 12.0 s
2026-12-02 10:00:05,000 INFO gym_compose.sandbox.broker: removed the pulled image 127.0.0.1:5000/swe/sweap-images:a for the image budget (0.07 GB of pulled images held, budget 0.10 GB)
2026-12-02 10:00:06,000 INFO gym_compose.sandbox.broker: lease s-1 of python: pulled in 3.0 s, exec ok
"""


@pytest.fixture
def engine(tmp_path, monkeypatch):
    return install_fake_docker(tmp_path, monkeypatch)


def test_the_brokers_line_reads_back_as_the_image_it_names():
    line = f"2026-12-02 10:00:03,000 INFO gym_compose.sandbox.broker: " \
           f"{BROKER_PULLED_LINE.format(image='reg.example:5000/ns/img:tag', seconds=95.04)}"
    assert re.findall(BROKER_PULLED_PATTERN, line, re.MULTILINE) == ["reg.example:5000/ns/img:tag"]


def test_the_images_pulled_are_read_from_every_broker_of_the_project_log(engine, tmp_path):
    (tmp_path / "broker.log").write_text(BROKER_LOG)
    calls = engine(f"""
"ps -q -a --filter label=io.gym-compose.project=p --filter label=io.gym-compose.role=sandbox-broker") echo b1; echo b2 ;;
"logs b1") cat {tmp_path / "broker.log"} >&2 ;;
"logs b2") echo "2026-12-02 11:00:00,000 INFO gym_compose.sandbox.broker: pulled other/img:1 in 0.4 s" ;;
""")
    assert pulled_task_images("p") == ["127.0.0.1:5000/swe/sweap-images:a", "other/img:1",
                                       "registry.example/swe@sha256:abc"]
    assert "logs b1" in calls() and "logs b2" in calls()


def test_no_broker_means_no_image_and_no_log_asked(engine):
    calls = engine("")
    assert pulled_task_images("p") == []
    assert not any(call.startswith("logs") for call in calls())


def test_each_image_is_removed_without_force_and_one_in_use_or_gone_is_told_apart(engine):
    calls = engine("""
"image rm a:1") echo "Untagged: a:1" ;;
"image rm b:1") echo "Error response from daemon: conflict: unable to remove repository reference \\"b:1\\" (must force) - container 0f3 is using its referenced image 5d1" >&2; exit 1 ;;
"image rm c:1") echo "Error response from daemon: No such image: c:1" >&2; exit 1 ;;
""")
    outcome = remove_task_images(["a:1", "b:1", "c:1"])
    assert outcome.removed == ["a:1"] and outcome.gone == ["c:1"]
    assert list(outcome.in_use) == ["b:1"] and "container 0f3 is using its referenced image" in outcome.in_use["b:1"]
    assert not any("--force" in call or " -f" in call for call in calls())


class Project:
    name, sandbox_backend = "p", "docker"

    def __init__(self, steps: list[str]):
        self.steps = steps

    def down(self):
        self.steps.append("down")
        return None


def test_every_removal_records_what_the_broker_pulled_and_down_images_removes_it(monkeypatch, tmp_path, capsys):
    """`up --benchmark` removes its stack at the end: the images its broker pulled are on record for a
    later `down --images`, which keeps (and records again) one that a container still uses."""
    from gym_compose.engine.targets import sandbox_containers
    from gym_compose.engine.targets.sandbox_containers import ImageRemoval
    from gym_compose.stack import lifecycle, teardown
    from gym_compose.stack.pulled_images import ledger_path

    monkeypatch.setenv("GYM_COMPOSE_STATE_DIR", str(tmp_path))
    steps: list[str] = []
    pulled = {"first": ["a:1", "b:1"], "second": ["c:1"]}
    run = iter(["first", "second"])
    monkeypatch.setattr(sandbox_containers, "pulled_task_images", lambda name: steps.append("read") or pulled[next(run)])
    teardown.down_quietly(Project(steps))  # the end of a first `up --benchmark`
    teardown.down_quietly(Project(steps))  # and of a second one
    assert steps == ["read", "down", "read", "down"]
    assert ledger_path("p").read_text().split() == ["a:1", "b:1", "c:1"]

    removals: list[list[str]] = []
    monkeypatch.setattr(sandbox_containers, "pulled_task_images", lambda name: [])
    monkeypatch.setattr(sandbox_containers, "remove_task_images", lambda images: removals.append(images) or
                        ImageRemoval(removed=["a:1"], gone=["c:1"], in_use={"b:1": "container 0f3 is using it"}))
    monkeypatch.setattr(lifecycle, "existing_project", lambda name: Project(steps))
    lifecycle.down_command("p", images=True)
    said = capsys.readouterr()
    assert removals == [["a:1", "b:1", "c:1"]]
    assert "removed 1 task image(s) that project 'p''s sandbox broker pulled; 1 were gone already" in said.out + said.err
    assert "kept b:1: container 0f3 is using it" in said.out + said.err
    assert ledger_path("p").read_text().split() == ["b:1"]

    lifecycle.down_command("p")  # without --images: the record stays
    assert removals == [["a:1", "b:1", "c:1"]] and ledger_path("p").read_text().split() == ["b:1"]


def test_a_target_without_docker_sandboxes_asks_the_engine_nothing(monkeypatch, tmp_path):
    from gym_compose.engine.targets import sandbox_containers
    from gym_compose.stack.pulled_images import ledger_path, remember_pulled_images

    monkeypatch.setenv("GYM_COMPOSE_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(sandbox_containers, "pulled_task_images", lambda name: pytest.fail("asked the engine"))
    local = Project([])
    local.sandbox_backend = None
    remember_pulled_images(local)
    assert not ledger_path("p").exists()
