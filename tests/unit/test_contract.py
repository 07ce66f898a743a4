"""One contract between host and containers: files that cannot import gym_compose.contract (the
healthcheck probe, the Dockerfiles, the compose templates) spell the same values, and no module
spells a contract value of its own."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import yaml

from gym_compose import contract
from gym_compose.server import healthcheck

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gym_compose"


def test_the_healthcheck_probes_ask_the_contracts_readiness_path():
    assert healthcheck.READY_PATH == contract.READY_PATH  # it runs with python -I -S: no package to import
    script = PACKAGE / "server" / "healthcheck.sh"  # the containers' probe: bash, no package to import
    assert script.relative_to(REPO).as_posix() == contract.HEALTHCHECK_SCRIPT.removeprefix(contract.RUNTIME_ROOT + "/")
    assert f"path={contract.READY_PATH} " in script.read_text()  # the default; --root asks / instead


def test_compose_templates_spell_the_contracts_user_and_probe():
    server = yaml.safe_load((REPO / "compose_templates/server.yaml").read_text())
    assert server["user"] == contract.SERVER_USER
    assert contract.HEALTHCHECK_SCRIPT in server["healthcheck"]["test"]
    collector = yaml.safe_load((REPO / "compose_templates/collector.yaml").read_text())
    assert collector["entrypoint"] == ["python", "-m", "gym_compose.collect"]


def test_dockerfiles_spell_the_contracts_user_paths_and_variables():
    venv = (REPO / "docker/base-venv.sh").read_text()
    runtime = (REPO / "docker/base-runtime.sh").read_text()
    changes = (REPO / "docker/base.changes").read_text()
    uid = contract.SERVER_UID
    assert f"server:x:{uid}:{uid}:" in venv and f"server:x:{uid}:" in venv
    assert f"echo {contract.RUNTIME_ROOT} >" in venv  # the .pth file that puts the package on sys.path
    assert f"USER {contract.SERVER_USER}" in changes
    assert f"WORKDIR {contract.SERVER_DIR}" in changes
    assert f"{contract.SERVER_DIR_ENV}={contract.SERVER_DIR}" in changes
    assert f'cp -R "$build/gym_compose" {contract.RUNTIME_ROOT}/' in runtime
    assert f"CMD {json.dumps(list(contract.SERVER_COMMAND))}" in changes  # what the network guard wraps
    nemo_gym_runtime = (REPO / "docker/nemo-gym-runtime.changes").read_text()
    assert f"CMD {json.dumps(list(contract.NEMO_GYM_SERVER_COMMAND))}" in nemo_gym_runtime
    assert f"USER {contract.SERVER_USER}" in nemo_gym_runtime
    assert f"server:x:{uid}:{uid}:" in (REPO / "docker/nemo-gym-runtime-venv.sh").read_text()
    for name in ("server-native.Dockerfile",):
        text = (REPO / "docker" / name).read_text()
        assert f"COPY server/ {contract.SERVER_DIR}/" in text, name
        users = re.findall(r"^USER (\S+)", text, re.MULTILINE)
        assert set(users) <= {"root", contract.SERVER_USER}, name  # root only in build stages
    for name in ("server-native.Dockerfile",):  # server images keep their base's CMD
        assert not re.findall(r"^(CMD|ENTRYPOINT) ", (REPO / "docker" / name).read_text(), re.MULTILINE), name


# Values distinctive enough that spelling one anywhere but the contract is a second source.
DISTINCTIVE = ("CONFIG_DICT_ENV", "CONFIG_PATH_ENV", "BIND_HOST_ENV", "SERVER_DIR_ENV", "SECRETS_DIR_ENV",
               "HEAD_VIEW_ENV", "LOG_LEVEL_ENV", "PROJECT_ENV", "READY_PATH", "TIME_LEFT_HEADER", "SECRET_PREFIX",
               "PROJECT_LABEL", "ROLE_LABEL", "INSTANCE_LABEL", "IMAGE_LABEL", "CACHE_LABEL", "RUNTIME_ROOT",
               "SERVER_DIR", "SECRETS_DIR", "COLLECTOR_INPUT", "COLLECTOR_RESULTS", "SERVER_USER", "HEALTHCHECK_SCRIPT",
               "SANDBOX_BROKER_PORT_ENV", "SANDBOX_POLICY_ENV", "SANDBOX_BACKEND_ENV", "SANDBOX_OWNERS_ENV",
               "SANDBOX_BROKER_SECRET", "SANDBOX_BROKER_ENV", "SANDBOX_TOKEN_FILE_ENV", "SANDBOX_LABEL",
               "SANDBOX_SERVER_LABEL", "KUBERNETES_PART_OF", "KUBERNETES_ROLE_LABEL", "KUBERNETES_SANDBOX_OWNER_LABEL")
MAY_SPELL = {"contract.py", "server/healthcheck.py"}  # the probe is checked above


def string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_no_module_spells_a_contract_value_of_its_own():
    values = {getattr(contract, name): name for name in DISTINCTIVE}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in MAY_SPELL:
            continue
        for text in string_constants(path):
            if text in values:
                offenders.append(f"{relative}: {text!r} (contract.{values[text]})")
    assert offenders == []
