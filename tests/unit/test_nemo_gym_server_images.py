"""NeMo Gym-runtime server images: what the committed container of the runtime gets, with the docker CLI faked."""

from __future__ import annotations

from pathlib import Path

from gym_compose.engine.images import nemo_gym_images
from gym_compose.engine.images.image_settings import IMAGE_LABEL
from gym_compose.plan.model import StackOptions
from gym_compose.plan.planner import plan_stack
from gym_compose.plan.referenced_files import referenced_paths

RUNTIME = "gym-compose/nemo-gym-runtime:test"


def agent(root: Path, requirements: str) -> Path:
    folder = root / "responses_api_agents" / "tool_simulation_agent"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("APP = 1\n")
    (folder / "requirements.txt").write_text(requirements)
    return folder


def build(engine, folder: Path, monkeypatch, referenced: tuple[str, ...] = ()) -> dict:  # noqa: F811
    def fake_wheelhouse(requirements, cache_dir, progress, **options):
        (cache_dir / "wheels").mkdir(parents=True, exist_ok=True)
        return cache_dir / "wheels"

    monkeypatch.setattr(nemo_gym_images, "ensure_wheelhouse", fake_wheelhouse)
    monkeypatch.setattr(nemo_gym_images, "pinned_versions", lambda folder: "")
    engine.add(RUNTIME, {f"{IMAGE_LABEL}.parent": "gym-compose/debian-python313:x"})
    nemo_gym_images.ensure_nemo_gym_server_image(folder, "responses_api_agents", (), RUNTIME, progress=lambda _: None,
                                                 referenced=referenced)
    return engine.commits[-1]


STAGING = "/tmp/gym-compose-build"


def test_a_server_needing_only_nemo_gym_gets_the_runtime_and_its_code_in_one_commit(engine, tmp_path, monkeypatch):  # noqa: F811
    done = build(engine, agent(tmp_path, "-e nemo-gym[dev] @ ../../\n"), monkeypatch)
    assert done["parent"] == RUNTIME and len(engine.commits) == 1 and not engine.builds
    assert done["command"] == ["sh", f"{STAGING}/nemo-gym-server.sh", ""]
    assert "/srv/gym/responses_api_agents/tool_simulation_agent/app.py" in done["files"]
    assert f"{STAGING}/requirements.txt" not in done["files"]  # the script installs nothing then
    env = [change for change in done["changes"] if change.startswith("ENV ")]
    assert env == ["ENV GYM_COMPOSE_SERVER_DIR=/srv/gym/responses_api_agents/tool_simulation_agent "
                   "PYTHONPATH=/srv/gym:/opt/server-packages"]
    image = engine.images[done["tag"]]["Config"]
    assert image["Labels"][f"{IMAGE_LABEL}.runtime"] == "nemo_gym"
    assert image["Cmd"] == engine.images[RUNTIME]["Config"]["Cmd"]  # the runtime's launcher, not the script


def test_a_server_with_its_own_packages_installs_them_offline_from_the_staged_wheels(engine, tmp_path, monkeypatch):  # noqa: F811
    done = build(engine, agent(tmp_path, "-e nemo-gym[dev] @ ../../\nsympy\n"), monkeypatch)
    assert done["command"] == ["sh", f"{STAGING}/nemo-gym-server.sh", "--no-index"]
    assert {f"{STAGING}/requirements.txt", f"{STAGING}/shadow.txt"} <= set(done["files"])
    script = nemo_gym_images.SERVER_SCRIPT.read_text()
    assert "pip install" in script and '-c "$build/runtime-constraints.txt"' in script


# Files of a NeMo Gym checkout that a server's config names from the checkout's root (critpt_agent's
# `turn2_prompt_fpath: benchmarks/critpt/prompts/turn2.yaml`) go into its image at the same path
# under /srv/gym, where the server opens them (plan/referenced_files.py).
def checkout(root: Path) -> Path:
    agent = root / "responses_api_agents" / "critpt_agent"
    agent.mkdir(parents=True)
    (agent / "app.py").write_text("from nemo_gym.not_in_the_layer import Thing\n")  # the NeMo Gym runtime
    (agent / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../\n")
    (agent / "own.yaml").write_text("x: 1\n")
    prompts = root / "benchmarks" / "critpt" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "turn2.yaml").write_text("user: '{code_template}'\n")
    (prompts / "unused.yaml").write_text("user: no\n")
    (root / "benchmarks" / "critpt" / "data").mkdir()
    (root / "benchmarks" / "critpt" / "data" / "train.jsonl").write_text("{}\n")
    (root / "benchmarks" / "templates").mkdir()
    (root / "benchmarks" / "templates" / "a.txt").write_text("a\n")
    return agent


def agent_config(**keys) -> dict:
    return {"critpt_agent": {"responses_api_agents": {"critpt_agent": {
        "entrypoint": "app.py",
        "resources_server": {"type": "resources_servers", "name": "x"},
        "model_server": {"type": "responses_api_models", "name": "policy_model"},
        **keys,
    }}}}


def test_a_file_and_a_folder_the_config_names_are_found_and_nothing_else(tmp_path):
    checkout(tmp_path)
    spec = {"turn2_prompt_fpath": "benchmarks/critpt/prompts/turn2.yaml",
            "templates": ["benchmarks/templates", "benchmarks/templates/a.txt"],  # the file is in the folder
            "own": "responses_api_agents/critpt_agent/own.yaml",  # in the image already
            "datasets": [{"jsonl_fpath": "benchmarks/critpt/data/train.jsonl"}],  # the collector's
            "missing": "benchmarks/critpt/prompts/turn3.yaml", "absolute": "/etc/passwd",
            "escape": "benchmarks/../../outside.yaml", "word": "app.py", "url": "http://h/benchmarks/x"}
    found = referenced_paths(spec, tmp_path, ("responses_api_agents/critpt_agent",))
    assert found == ("benchmarks/critpt/prompts/turn2.yaml", "benchmarks/templates")


def test_the_nemo_gym_runtime_image_holds_the_named_file_at_its_checkout_path(engine, tmp_path, monkeypatch):  # noqa: F811
    agent = checkout(tmp_path)
    stack = plan_stack(agent_config(turn2_prompt_fpath="benchmarks/critpt/prompts/turn2.yaml"), [tmp_path],
                       StackOptions(project="p"))
    (service,) = [s for s in stack.services if s.instance == "critpt_agent"]
    assert service.runtime == "nemo_gym" and service.referenced_paths == ("benchmarks/critpt/prompts/turn2.yaml",)

    with_file = build(engine, agent, monkeypatch, referenced=service.referenced_paths)
    assert "/srv/gym/benchmarks/critpt/prompts/turn2.yaml" in with_file["files"]
    assert "/srv/gym/benchmarks/critpt/prompts/unused.yaml" not in with_file["files"]
    assert "/srv/gym/responses_api_agents/critpt_agent/app.py" in with_file["files"]
    without = build(engine, agent, monkeypatch)
    assert without["tag"] != with_file["tag"]  # the file is part of the image's content hash


def test_the_runtime_is_its_venv_then_the_container_modules_each_one_commit(engine, tmp_path, monkeypatch):  # noqa: F811
    def fake_wheelhouse(requirements, cache_dir, progress, **options):
        folder = tmp_path / "runtime-wheels"
        folder.mkdir(exist_ok=True)
        (folder / "nemo_gym-0.7.0-py3-none-any.whl").write_bytes(b"")
        return folder

    monkeypatch.setattr(nemo_gym_images, "ensure_wheelhouse", fake_wheelhouse)
    monkeypatch.setattr(nemo_gym_images, "ensure_nemo_gym_python_image", lambda settings, progress: "gym-compose/debian-python313:p")
    engine.add("gym-compose/debian-python313:p", user="", cmd=["python3"])
    engine.add("gym-compose/base:b", {f"{IMAGE_LABEL}.parent": "gym-compose/debian-python:x"})
    tag = nemo_gym_images.ensure_nemo_gym_runtime_image("gym-compose/base:b", progress=lambda _: None)

    venv, runtime = engine.commits
    assert venv["parent"] == "gym-compose/debian-python313:p" and runtime["parent"] == venv["tag"]
    assert venv["command"] == ["sh", f"{STAGING}/nemo-gym-runtime-venv.sh", "--no-index"]
    assert f"{STAGING}/wheels/nemo_gym-0.7.0-py3-none-any.whl" in venv["files"]
    assert runtime["command"] == [] and runtime["tag"] == tag  # copies only: nothing runs
    assert "/opt/gym-compose/gym_compose/server/nemo_gym_launch.py" in runtime["files"]
    assert "/opt/gym-compose/gym_compose_sandbox_provider-1.0.dist-info/entry_points.txt" in runtime["files"]
    config = engine.images[tag]["Config"]
    assert config["User"] == "10001:10001" and config["Cmd"] == ["python", "-m", "gym_compose.server.nemo_gym_launch"]
    assert config["Labels"][f"{IMAGE_LABEL}.parent"] == "gym-compose/debian-python313:p"  # read back: offline

    engine.commits.clear()
    assert nemo_gym_images.ensure_nemo_gym_runtime_image("gym-compose/base:b", progress=lambda _: None) == tag
    assert engine.commits == []  # up to date: nothing built twice
