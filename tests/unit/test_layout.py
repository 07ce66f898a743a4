"""The top level the product card names: server_images/ builds images, configs/ does not, each
benchmark holds its own config, data and prepare script, and no test reads outside the repo."""

import ast
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


def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/ and fixtures in conftest.py files, so a test module is
    never imported for its helpers (its tests would run twice and its fixtures shadow others)."""
    imported = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            imported += [f"{path.relative_to(REPO)}: {name}" for name in names
                         if name.rpartition(".")[2].startswith("test_")]
    assert imported == []


def layout_tree() -> tuple[set[str], set[str], set[str]]:
    """What docs/development.md's tree names under gym_compose/: its top-level modules, its
    packages, and the packages inside them (indented under their parent)."""
    text = (REPO / "docs" / "development.md").read_text()
    block = text[text.index("```\ngym_compose/\n") + 4:]
    block = block[:block.index("```")]
    modules, packages, nested, parent = set(), set(), set(), None
    for line in block.splitlines()[1:]:
        if not line.startswith("  "):
            break  # the repository's other folders
        words = line.split()
        if line.startswith("    ") and not line.startswith("     ") and words[0].endswith("/"):
            nested.add(f"{parent}/{words[0].rstrip('/')}")
        elif line.startswith("  ") and not line.startswith("   "):
            if words[0].endswith("/"):
                parent = words[0].rstrip("/")
                packages.add(parent)
            else:
                modules |= {word for word in words if word.endswith(".py")}
    return modules, packages, nested


def test_the_layout_tree_in_development_md_names_every_package_and_top_level_module():
    package = REPO / "gym_compose"
    modules, packages, nested = layout_tree()
    assert modules == {path.name for path in package.glob("*.py")}
    assert packages == {path.parent.name for path in package.glob("*/__init__.py")}
    assert nested and all((package / name / "__init__.py").is_file() for name in nested), nested
