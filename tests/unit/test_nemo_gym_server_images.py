"""NeMo Gym-runtime server images: which Dockerfile a server gets, with the docker CLI faked."""

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
    return engine.builds[-1]


def instructions(dockerfile: str) -> list[str]:
    return [line.split()[0] for line in dockerfile.splitlines() if line and not line[0].isspace()
            and not line.startswith("#") and line.split()[0].isupper()]


def test_a_server_needing_only_nemo_gym_gets_the_runtime_and_its_code_in_few_steps(engine, tmp_path, monkeypatch):  # noqa: F811
    done = build(engine, agent(tmp_path, "-e nemo-gym[dev] @ ../../\n"), monkeypatch)
    assert done["dockerfile"] == nemo_gym_images.CODE_ONLY_DOCKERFILE.read_text()
    steps = instructions(done["dockerfile"])
    assert steps.count("FROM") == 1 and "RUN" not in steps and len(steps) <= 6
    assert "GYM_COMPOSE_SERVER_DIR=${SERVER_DIR}" in done["dockerfile"]
    assert done["args"] == {"RUNTIME_IMAGE": RUNTIME,
                            "SERVER_DIR": "/srv/gym/responses_api_agents/tool_simulation_agent"}
    assert "gym/responses_api_agents/tool_simulation_agent/app.py" in done["files"]


def test_a_server_with_its_own_packages_keeps_the_requirements_stage(engine, tmp_path, monkeypatch):  # noqa: F811
    done = build(engine, agent(tmp_path, "-e nemo-gym[dev] @ ../../\nsympy\n"), monkeypatch)
    assert done["dockerfile"] == nemo_gym_images.SERVER_DOCKERFILE.read_text()
    assert "pip install" in done["dockerfile"] and "PIP_INSTALL_OPTIONS" in done["args"]


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
    assert "gym/benchmarks/critpt/prompts/turn2.yaml" in with_file["files"]
    assert "gym/benchmarks/critpt/prompts/unused.yaml" not in with_file["files"]
    assert "gym/responses_api_agents/critpt_agent/app.py" in with_file["files"]
    without = build(engine, agent, monkeypatch)
    assert without["tag"] != with_file["tag"]  # the file is part of the image's content hash
