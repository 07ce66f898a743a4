"""benchmarks/swebench_pro/prepare.py with no network: public rows plus a stand-in of the
evaluator's repository give rows with its scripts pinned in, the data set's fields unchanged."""

from __future__ import annotations

import importlib.util
import json

import pytest

from gym_compose.paths import PROJECT_ROOT
from gym_compose.server.swe.swe_row import SWERow

spec = importlib.util.spec_from_file_location("swebench_pro_prepare",
                                              PROJECT_ROOT / "benchmarks" / "swebench_pro" / "prepare.py")
prepare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prepare)

PUBLIC = {"repo": "org/proj", "instance_id": "instance_org__proj-1", "base_commit": "a" * 40, "patch": "diff",
          "test_patch": "diff", "problem_statement": "It breaks.", "requirements": "- fix it", "interface": "none",
          "repo_language": "python", "fail_to_pass": "['t::a']", "pass_to_pass": "[]",
          "before_repo_set_cmd": "git checkout x -- t", "selected_test_files_to_run": "['t']",
          "dockerhub_tag": "org.proj-1", "issue_specificity": "[]", "issue_categories": "[]"}


def evaluator(tmp_path):
    root = tmp_path / "evaluator"
    instance = PUBLIC["instance_id"]
    for relative, text in {f"run_scripts/{instance}/run_script.sh": "#!/bin/bash\npytest \"$@\"\n",
                           f"run_scripts/{instance}/parser.py": "print('parse')\n",
                           f"dockerfiles/base_dockerfile/{instance}/Dockerfile": "FROM python\nENV A=1\n",
                           f"dockerfiles/instance_dockerfile/{instance}/Dockerfile": "FROM base\n"}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def test_rows_get_the_evaluators_files_and_a_prompt(tmp_path):
    output = tmp_path / "rows.jsonl"
    count = prepare.prepare([PUBLIC], evaluator(tmp_path), output, pin_digests=False, digests_file=tmp_path / "d.json")
    (row,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert count == 1 and {key: row[key] for key in PUBLIC} == PUBLIC
    assert row["run_script"].startswith("#!/bin/bash") and row["parser_script"] == "print('parse')\n"
    assert row["base_dockerfile"].endswith("ENV A=1\n") and row["image_digest"] == ""
    assert row["evaluator_commit"] == prepare.EVALUATOR_COMMIT and row["dataset_revision"] == prepare.DATASET_REVISION
    assert "It breaks." in row["responses_create_params"]["input"][0]["content"]
    SWERow.model_validate(row)


def test_cached_digests_are_pinned_without_asking_docker_hub(tmp_path):
    digests = tmp_path / "d.json"
    digests.write_text(json.dumps({PUBLIC["dockerhub_tag"]: "sha256:" + "1" * 64}))
    output = tmp_path / "rows.jsonl"
    prepare.prepare([PUBLIC, {**PUBLIC, "instance_id": "other"}], evaluator(tmp_path), output, pin_digests=True,
                    limit=1, digests_file=digests)
    assert json.loads(output.read_text())["image_digest"] == "sha256:" + "1" * 64


def test_a_missing_evaluator_file_stops_with_its_name(tmp_path):
    with pytest.raises(SystemExit, match="run_scripts/nope/run_script.sh"):
        prepare.prepare([{**PUBLIC, "instance_id": "nope"}], evaluator(tmp_path), tmp_path / "rows.jsonl",
                        pin_digests=False, digests_file=tmp_path / "d.json")
    assert not (tmp_path / "rows.jsonl").exists() and not (tmp_path / "rows.partial").exists()
