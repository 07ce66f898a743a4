"""Which runtime a server gets, from its imports (ast), the docker.runtime key, and the launcher's
environment for NeMo Gym-runtime servers."""

from __future__ import annotations

import pytest
import yaml

from gym_compose.config import instances
from gym_compose.errors import UserError
from gym_compose.plan.planner import source_dir_of
from gym_compose.plan.runtime_choice import LEAN, NEMO_GYM, choose_runtime, compat_names, missing_from_compat
from gym_compose.plan.service_spec import read_docker_block
from gym_compose.server.compat.names import MODULES
from gym_compose.server.nemo_gym_launch import launch_environment


def server(root, name, code, server_type="resources_servers"):
    folder = root / server_type / name
    folder.mkdir(parents=True)
    (folder / "app.py").write_text(code)
    return folder


def test_a_server_whose_imports_the_layer_provides_runs_lean(tmp_path):
    folder = server(tmp_path, "ok", "from nemo_gym.base_resources_server import SimpleResourcesServer\n"
                                    "from nemo_gym import server_utils\n")
    choice = choose_runtime(folder, None, "resources_servers")
    assert choice.runtime == LEAN and "compatibility layer" in choice.reason


def test_a_missing_module_or_name_picks_the_nemo_gym_runtime_and_says_which(tmp_path):
    folder = server(tmp_path, "judge", "from nemo_gym.judge import Judge\n"
                                       "from nemo_gym.base_resources_server import NoSuchThing\n")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_app.py").write_text("import nemo_gym.testing_only\n")  # tests are not read
    assert missing_from_compat(folder) == ["nemo_gym.base_resources_server.NoSuchThing", "nemo_gym.judge"]
    choice = choose_runtime(folder, None, "resources_servers")
    assert choice.runtime == NEMO_GYM and "nemo_gym.judge" in choice.reason


def test_importing_another_server_of_the_root_picks_nemo_gym_and_names_it_transitively(tmp_path):
    server(tmp_path, "base", "from resources_servers.deeper.app import X\n")
    server(tmp_path, "deeper", "X = 1\n")
    folder = server(tmp_path, "user", "from resources_servers.base.app import X\n"
                                      "from resources_servers.user.helpers import y\n")
    choice = choose_runtime(folder, None, "resources_servers")
    assert choice.runtime == NEMO_GYM
    assert choice.siblings == ("resources_servers/base", "resources_servers/deeper")


def test_a_file_read_from_another_servers_folder_brings_that_folder_along(tmp_path):
    # swebench_pro uploads Path(__file__).parent.parent / "swebench" / "anti_cheat_setup.sh"
    server(tmp_path, "swebench", "X = 1\n")
    server(tmp_path, "unrelated", "X = 1\n")
    folder = server(tmp_path, "pro", "from pathlib import Path\n"
                                     "SCRIPT = Path(__file__).parent.parent / 'swebench' / 'anti_cheat_setup.sh'\n"
                                     "DATA = Path(__file__).parent / 'unrelated'\n"
                                     "OWN = Path(__file__).resolve().parents[1] / 'pro' / 'x'\n")
    choice = choose_runtime(folder, NEMO_GYM, "resources_servers")
    assert choice.siblings == ("resources_servers/swebench",)


def test_the_config_key_overrides_the_choice_and_builtins_stay_lean(tmp_path):
    folder = server(tmp_path, "ok", "import json\n")
    assert choose_runtime(folder, NEMO_GYM, "resources_servers").runtime == NEMO_GYM
    assert choose_runtime(None, NEMO_GYM).runtime == LEAN
    assert read_docker_block("x", {"runtime": "nemo_gym"}).runtime == NEMO_GYM
    assert read_docker_block("x", {"runtime": "auto"}).runtime is None
    with pytest.raises(UserError, match="docker.runtime must be one of"):
        read_docker_block("x", {"runtime": "fast"})


def model_instance(runtime=None):
    spec = {"entrypoint": "app.py", "base_url": "http://x/v1", **({"docker": {"runtime": runtime}} if runtime else {})}
    (instance,) = instances({"policy_model": {"responses_api_models": {"vllm_model": spec}}})
    return instance


def test_a_builtin_name_runs_nemo_gyms_own_code_only_when_the_config_asks(tmp_path):
    folder = server(tmp_path, "vllm_model", "from nemo_gym.base_responses_api_model import X\n",
                    server_type="responses_api_models")
    assert source_dir_of(model_instance(), [tmp_path]) is None  # gym-compose's built-in
    assert source_dir_of(model_instance(NEMO_GYM), [tmp_path], NEMO_GYM) == folder
    with pytest.raises(UserError, match="no search root holds responses_api_models/vllm_model/app.py"):
        source_dir_of(model_instance(NEMO_GYM), [tmp_path / "elsewhere"], NEMO_GYM)


def test_the_launcher_starts_the_entrypoint_as_gym_env_start_does(tmp_path):
    folder = server(tmp_path, "srv", "print('hi')\n")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "key").write_text("s3cret\n")
    config = {"srv": {"resources_servers": {"srv": {"entrypoint": "app.py", "host": "srv", "port": 8000,
                                                    "api_key": "secret://key"}}},
              "head_server": {"host": "head", "port": 11000}}
    cwd, environ, argv = launch_environment({"NEMO_GYM_CONFIG_DICT": yaml.safe_dump(config),
                                             "NEMO_GYM_CONFIG_PATH": "srv", "GYM_COMPOSE_SERVER_DIR": str(folder),
                                             "GYM_COMPOSE_SECRETS_DIR": str(secrets)})
    assert cwd == folder and argv[1:] == ["app.py"]
    assert environ["PYTHONPATH"].split(":")[:2] == [str(folder), "/srv/gym"]
    handed = yaml.safe_load(environ["NEMO_GYM_CONFIG_DICT"])
    spec = handed["srv"]["resources_servers"]["srv"]
    assert spec["host"] == "0.0.0.0" and spec["api_key"] == "s3cret"
    assert handed["dry_run"] is False and handed["head_server"] == {"host": "head", "port": 11000}


def test_a_package_only_nemo_gyms_dependencies_give_picks_nemo_gym(tmp_path):
    # asr_with_pc's app.py imports numpy, which nemo-gym brings and the lean base lacks
    folder = server(tmp_path, "numeric", "import numpy as np\nfrom nemo_gym import server_utils\n")
    choice = choose_runtime(folder, None, "resources_servers")
    assert choice.runtime == NEMO_GYM and "numpy" in choice.reason


def test_the_servers_own_requirements_and_data_scripts_keep_it_lean(tmp_path):
    folder = server(tmp_path, "pictures", "import PIL.Image\nimport yaml\nfrom .helpers import scale\n")
    (folder / "requirements.txt").write_text("-e nemo-gym[dev] @ ../../\nPillow>=10\n")
    (folder / "helpers.py").write_text("import json\nscale = 2\n")
    (folder / "generate_data.py").write_text("import datasets\n")  # not imported by app.py
    assert choose_runtime(folder, None, "resources_servers").runtime == LEAN


def test_own_modules_are_followed_by_their_checkout_path(tmp_path):
    folder = server(tmp_path, "fim", "from resources_servers.fim.runner import run\n")
    (folder / "runner.py").write_text("import ray\nrun = None\n")
    choice = choose_runtime(folder, None, "resources_servers")
    assert choice.runtime == NEMO_GYM and "ray" in choice.reason


def test_the_host_side_name_table_is_what_the_layer_gives():
    assert compat_names() == {module: frozenset(attributes()) for module, attributes in MODULES.items()}


def test_every_server_image_of_this_repository_runs_on_the_lean_runtime():
    # they are written for gym-compose; local_llama_cpp_model's xllamacpp comes from its requirements.txt
    from tests.support import REPO

    for folder in sorted((REPO / "server_images").iterdir()):
        if (folder / "app.py").is_file():
            choice = choose_runtime(folder, None, "resources_servers")
            assert choice.runtime == LEAN, (folder.name, choice.reason)
