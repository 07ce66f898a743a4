"""The top level the product card names: server_images/ builds images, configs/ does not, each
benchmark holds its own config, data and prepare script, and no test reads outside the repo."""

import re
from pathlib import Path

import yaml

from gym_compose.config.search import find_selector_file, resolve_path
from gym_compose.server.builtin import BUILTIN_IMPLEMENTATIONS

REPO = Path(__file__).resolve().parents[2]
IMAGE_FILES = ("app.py", "requirements.txt")


def test_every_server_images_folder_builds_an_image():
    folders = [path for path in (REPO / "server_images").iterdir() if path.is_dir() and path.name != "__pycache__"]
    assert folders
    assert [f.name for f in folders if not any((f / name).is_file() for name in IMAGE_FILES)] == []


def test_named_configs_build_no_image_and_name_only_built_in_implementations():
    configs = sorted((REPO / "configs").glob("*/*.yaml"))
    assert configs
    for path in configs:
        assert not (path.parent / "app.py").exists()
        data = yaml.safe_load(path.read_text()) or {}
        named = {impl for block in data.values() if isinstance(block, dict)
                 for servers in block.values() if isinstance(servers, dict) for impl in servers}
        assert named <= set(BUILTIN_IMPLEMENTATIONS), f"{path}: {named - set(BUILTIN_IMPLEMENTATIONS)} builds an image"


def test_selectors_and_nemo_gym_paths_find_the_named_configs():
    roots = [REPO]
    assert find_selector_file("model_type", "vllm_model/vllm_model_for_training", roots).path == \
        REPO / "configs/vllm_model/vllm_model_for_training.yaml"
    assert find_selector_file("agent_type", "simple_agent", roots).path == REPO / "configs/simple_agent/simple_agent.yaml"
    # a NeMo Gym config that includes its model by NeMo Gym's path finds this project's copy
    assert resolve_path("responses_api_models/openai_model/configs/openai_model.yaml", roots) == \
        REPO / "configs/openai_model/openai_model.yaml"
    assert resolve_path("resources_servers/calculator/data/example.jsonl", roots) == \
        REPO / "server_images/calculator/data/example.jsonl"


def test_each_benchmark_holds_its_config_data_and_prepare_script():
    # a benchmark is a folder with a config.yaml; benchmarks/prompts/ holds shared prompt configs, as NeMo Gym's does
    for folder in (path for path in (REPO / "benchmarks").iterdir() if (path / "config.yaml").is_file()):
        config = yaml.safe_load((folder / "config.yaml").read_text())
        datasets = [d for block in config.values() if isinstance(block, dict) for servers in block.values()
                    if isinstance(servers, dict) for spec in servers.values() if isinstance(spec, dict)
                    for d in spec.get("datasets") or []]
        assert datasets, folder
        for dataset in datasets:
            assert dataset["jsonl_fpath"].startswith(f"benchmarks/{folder.name}/data/")
            if "prepare_script" in dataset:
                assert dataset["prepare_script"] == f"benchmarks/{folder.name}/prepare.py"
                assert (REPO / dataset["prepare_script"]).is_file()
            else:  # rows that only `eval prepare` makes (SWE-bench Pro needs the internet) are not shipped
                assert (REPO / dataset["jsonl_fpath"]).is_file()


def test_no_test_reads_a_folder_outside_the_repository():
    outside = re.compile(r"""\.\./shared|/work/shared|(\.parent|parents\[\d\])\s*/\s*["']shared["']""")
    offenders = [str(path.relative_to(REPO)) for folder in ("tests", "server_images", "bench")
                 for path in (REPO / folder).rglob("*.py")
                 if path != Path(__file__).resolve() and outside.search(path.read_text())]
    assert offenders == []
