"""NeMo Gym-runtime server images: which Dockerfile a server gets, with the docker CLI faked."""

from __future__ import annotations

from pathlib import Path

from gym_compose.engine.images import nemo_gym_images
from gym_compose.engine.images.image_settings import IMAGE_LABEL

RUNTIME = "gym-compose/nemo-gym-runtime:test"


def agent(root: Path, requirements: str) -> Path:
    folder = root / "responses_api_agents" / "tool_simulation_agent"
    folder.mkdir(parents=True)
    (folder / "app.py").write_text("APP = 1\n")
    (folder / "requirements.txt").write_text(requirements)
    return folder


def build(engine, folder: Path, monkeypatch) -> dict:  # noqa: F811
    def fake_wheelhouse(requirements, cache_dir, progress, **options):
        (cache_dir / "wheels").mkdir(parents=True, exist_ok=True)
        return cache_dir / "wheels"

    monkeypatch.setattr(nemo_gym_images, "ensure_wheelhouse", fake_wheelhouse)
    monkeypatch.setattr(nemo_gym_images, "pinned_versions", lambda folder: "")
    engine.add(RUNTIME, {f"{IMAGE_LABEL}.parent": "gym-compose/debian-python313:x"})
    nemo_gym_images.ensure_nemo_gym_server_image(folder, "responses_api_agents", (), RUNTIME, progress=lambda _: None)
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
