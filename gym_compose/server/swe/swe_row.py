"""A SWE-bench Pro row (NeMo Gym 0.7 `resources_servers/swebench_pro`, the public ScaleAI data set
with the evaluator's scripts pinned in), read as it is: unknown fields are kept."""

from __future__ import annotations

import ast
import json
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

TestList = Union[str, list[str]]


class SWERow(BaseModel):
    model_config = ConfigDict(extra="allow")

    repo: str
    instance_id: str
    base_commit: str
    patch: str
    test_patch: str = ""
    problem_statement: str
    requirements: str = ""
    interface: str = ""
    repo_language: str = ""
    fail_to_pass: TestList
    pass_to_pass: TestList
    issue_specificity: str = ""
    issue_categories: str = ""
    before_repo_set_cmd: str = ""
    selected_test_files_to_run: TestList
    dockerhub_tag: str
    image_digest: str = ""
    run_script: str
    parser_script: str
    base_dockerfile: str = ""
    instance_dockerfile: str = ""
    subset: str = "pro"
    split: str = "test"


def listed_tests(value: TestList) -> list[str]:
    """A list of test names as the data set spells it: a list, or a string holding a JSON or a
    Python list literal (read without evaluating anything)."""
    if isinstance(value, list):
        parsed: Any = value
    elif not value.strip():
        parsed = []
    else:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError) as error:
                raise ValueError(f"not a list of test names: {value[:200]!r} ({error})") from None
    if not isinstance(parsed, (list, tuple)) or not all(isinstance(name, str) for name in parsed):
        raise ValueError(f"not a list of test names: {str(value)[:200]!r}")
    return list(parsed)


IMAGE_TEMPLATE_FIELDS = ("instance_id", "dockerhub_tag", "image_digest", "image_digest_hex")


def row_image(row: SWERow, image_repository: str, image_template: Optional[str] = None) -> str:
    """The sandbox image of a row: `image_template` filled in (IMAGE_TEMPLATE_FIELDS), else
    `<repository>@<image_digest>` when the row pins a digest, else `<repository>:<dockerhub_tag>`
    (NeMo Gym's rule)."""
    if image_template:
        return image_template.format(instance_id=row.instance_id, dockerhub_tag=row.dockerhub_tag,
                                     image_digest=row.image_digest,
                                     image_digest_hex=row.image_digest.removeprefix("sha256:"))
    if row.image_digest:
        return f"{image_repository}@{row.image_digest}"
    return f"{image_repository}:{row.dockerhub_tag}"
