"""What the viewer computes from a run folder: tasks, failures, figures, pages, rollouts, export."""

from __future__ import annotations

import re
import subprocess
import sys

import orjson
import pytest

from gym_compose.errors import UserError
from gym_compose.view.export import choose_rollouts, choose_tasks, export_data
from gym_compose.view.page import export_page, json_script
from gym_compose.view.run_folder import resolve_run_folders
from gym_compose.view.run_model import reward_histogram
from gym_compose.view.service import TaskQuery, ViewService
from tests.support.view import FAILURE_MESSAGE, REPO, failure_record, rollout_record, write_synthetic_run


@pytest.fixture
def run_dir(tmp_path):
    return write_synthetic_run(tmp_path / "run-a", tasks=8, repeats=4, failed_tasks=(5,), long_output_task=2)


def service_for(*folders) -> ViewService:
    service = ViewService(list(folders))
    service.refresh()
    return service


def test_tasks_group_rollouts_and_failed_attempts(run_dir):
    run = service_for(run_dir).runs[0]
    tasks = run.tasks()
    assert [t.index for t in tasks] == list(range(8))
    failed = tasks[5]
    assert failed.failed == 4 and failed.mean_reward is None
    assert all(cell.id.startswith("f") and cell.note == FAILURE_MESSAGE for cell in failed.cells)
    assert [cell.reward for cell in tasks[2].cells] == [1.0, 0.0, 1.0, 0.0]  # sorted by rollout index
    assert tasks[1].note.startswith("answered")  # the verifier's failure_reason
    assert tasks[0].prompt == "What is 2 * 3? (task 0)"


def test_a_rollout_answered_after_a_failed_attempt_is_marked_retried(tmp_path):
    folder = write_synthetic_run(tmp_path / "run", tasks=2, repeats=1)
    with (folder / "rollouts_failures.jsonl").open("ab") as f:
        f.write(orjson.dumps(failure_record(1, 0)) + b"\n")
    run = service_for(folder).runs[0]
    cell = run.tasks()[1].cells[0]
    assert (cell.status, cell.reward) == ("retried", 0.0)
    assert run.live_metrics()["failed_rollouts"] == 0


def test_figures_histogram_failures_and_pass_at_k(run_dir):
    service = service_for(run_dir)
    summary = service.summary(0)
    assert summary["live"]["rollouts"] == 28 and summary["live"]["failed_rollouts"] == 4
    assert {bar["label"]: bar["count"] for bar in summary["histogram"]} == {"0": 8, "1": 20}
    assert summary["failure_groups"] == [{"message": FAILURE_MESSAGE, "rollouts": 4}]
    from_file = summary["pass_at_k"]["calculator_simple_agent"]
    assert set(from_file) == {"pass@k", "pass@1[avg-of-k]"} and len(from_file["pass@k"]) == 4
    # without the metrics file (a run still going) the same curves come from the rollouts
    (run_dir / "rollouts_aggregate_metrics.json").unlink()
    fresh = service_for(run_dir).summary(0)
    assert fresh["metrics"] == []
    live = fresh["pass_at_k"]["calculator_simple_agent"]
    assert set(live) == set(from_file)
    for kind, values in from_file.items():
        assert live[kind] == pytest.approx(values), kind


def test_reward_histogram_bins_many_distinct_rewards():
    bars = reward_histogram([i / 100 for i in range(101)])
    assert len(bars) == 20 and sum(bar["count"] for bar in bars) == 101
    assert reward_histogram([]) == []


def test_task_page_filters_searches_sorts_and_pages(run_dir):
    service = service_for(run_dir)
    page = service.task_page(0, TaskQuery(status="failed"))
    assert [row["task"] for row in page["data"]] == [5] and page["recordsTotal"] == 8
    assert page["data"][0]["prompt"] is None  # a page never waits for rollouts_materialized_inputs.jsonl
    service.warm_sent_inputs()  # the server does this after its first indexing
    page = service.task_page(0, TaskQuery(status="failed"))
    assert page["data"][0]["prompt"] == "What is 7 * 8? (task 5)"  # no answer line: from what was sent
    assert [row["task"] for row in service.task_page(0, TaskQuery(search="(task 3)"))["data"]] == [3]
    by_mean = service.task_page(0, TaskQuery(order="mean", descending=True))["data"]
    assert by_mean[0]["mean"] == 1.0 and by_mean[-1]["mean"] is None  # only-failed tasks: worst
    assert service.task_page(0, TaskQuery(order="mean"))["data"][0]["task"] == 5
    second = service.task_page(0, TaskQuery(start=3, length=3))
    assert [row["task"] for row in second["data"]] == [3, 4, 5] and second["recordsFiltered"] == 8
    imperfect = {row["task"] for row in service.task_page(0, TaskQuery(status="imperfect"))["data"]}
    assert imperfect == {1, 2, 5, 6}
    with pytest.raises(ValueError, match="order must be one of"):
        service.task_page(0, TaskQuery(order="nope"))


def test_a_rollout_reads_as_a_conversation_with_its_verdict(run_dir):
    service = service_for(run_dir)
    cell = service.runs[0].tasks()[1].cells[0]
    view = service.rollout(0, cell.id)
    assert [b["kind"] for b in view["blocks"]] == ["message", "message", "tool_call", "tool_output", "message"]
    assert view["prompt_length"] == 2
    call, output, answer = view["blocks"][2:]
    assert call["name"] == "calculate" and '"expression": "3 * 4"' in call["arguments"]
    assert output["name"] == "calculate" and '"result": 12' in output["text"]
    assert answer["role"] == "assistant" and answer["text"] == "13"
    assert view["verdict"]["reward"] == 0.0 and view["verdict"]["expected_answer"] == 12
    assert view["verdict"]["failure_reason"] == "answered 13, expected 12"


def test_a_failed_rollout_shows_its_error_and_what_was_sent(run_dir):
    service = service_for(run_dir)
    cell = service.runs[0].tasks()[5].cells[1]
    view = service.rollout(0, cell.id)
    (failure,) = view["failures"]
    assert failure["message"] == FAILURE_MESSAGE and failure["http_status"] == 422
    assert '"msg": "Input should be a valid list"' in failure["body"]
    assert view["reward"] is None
    assert view["blocks"][1]["text"] == "What is 7 * 8? (task 5)"  # from rollouts_materialized_inputs.jsonl
    assert view["identity"] == {"_ng_task_index": 5, "_ng_rollout_index": 1}


def test_unknown_runs_and_rollouts_are_lookup_errors(run_dir):
    service = service_for(run_dir)
    for number, rollout_id in [(3, "r0"), (0, "r999"), (0, "x1"), (0, "f")]:
        with pytest.raises(LookupError):
            service.rollout(number, rollout_id)


def test_comparison_puts_the_tasks_that_differ_first(tmp_path):
    a = write_synthetic_run(tmp_path / "a", tasks=6, repeats=2)
    b = write_synthetic_run(tmp_path / "b", tasks=6, repeats=2, failed_tasks=(4,))
    service = service_for(a, b)
    result = service.comparison(TaskQuery(order="differs"))
    assert result["runs"] == ["a", "b"]
    first = result["data"][0]
    assert first["task"] == 4 and first["differs"] and first["cells"][1]["failed"] == 2
    assert not any(row["differs"] for row in result["data"][1:])
    only = service.comparison(TaskQuery(order="differs"), differing_only=True)
    assert [row["task"] for row in only["data"]] == [4]
    with pytest.raises(ValueError):
        service.comparison(TaskQuery(order="mean"))


def test_export_keeps_failed_and_lowest_reward_first_within_its_bounds(tmp_path):
    folder = write_synthetic_run(tmp_path / "big", tasks=40, repeats=2, failed_tasks=(33,))
    service = service_for(folder)
    tasks = service.runs[0].tasks()
    chosen = choose_tasks(tasks, 5)
    assert 33 in [t.index for t in chosen] and len(chosen) == 5
    assert all(t.mean_reward is None or t.mean_reward < 1 for t in chosen)
    ids = choose_rollouts(tasks, 4)
    assert ids[:2] == [cell.id for cell in tasks[33].cells]
    data = export_data(service, max_tasks=5, max_rollouts=4)
    assert len(data["tasks"][0]) == 5 and len(data["rollouts"]) == 4
    assert "5 of 40 tasks" in data["note"]


def test_exported_page_carries_everything_and_links_nothing(run_dir):
    html = export_page(export_data(service_for(run_dir)))
    assert re.search(r"<script[^>]*\ssrc=", html) is None
    assert re.search(r"<link[^>]*stylesheet", html) is None
    assert html.count('class="gym-asset"') == 2  # DataTables and plotly.js, inline
    embedded = re.search(r'<script id="gym-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    data = orjson.loads(embedded)
    assert data["mode"] == "export" and data["runs"][0]["live"]["rollouts"] == 28


def test_embedded_json_cannot_close_its_script_element():
    text = json_script({"evil": "</script><script>alert(1)</script><!--"})
    assert text.count("</script>") == 1
    inner = text[text.index(">") + 1: text.rindex("</script>")]
    assert orjson.loads(inner) == {"evil": "</script><script>alert(1)</script><!--"}


def test_run_folder_arguments(tmp_path):
    results = tmp_path / "results"
    older = write_synthetic_run(results / "x-20260101-000000", tasks=1)
    newer = write_synthetic_run(results / "x-20260102-000000", tasks=1)
    import os

    os.utime(older, (1, 1))
    assert resolve_run_folders([], results) == [newer]
    assert resolve_run_folders([older, newer]) == [older, newer]
    with pytest.raises(UserError, match="holds 2 run folders") as error:
        resolve_run_folders([results])
    assert "x-20260102-000000" in str(error.value)
    with pytest.raises(UserError, match="not found"):
        resolve_run_folders([tmp_path / "nope"])
    with pytest.raises(UserError, match="none under"):
        resolve_run_folders([], tmp_path / "empty")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match="is not a run folder"):
        resolve_run_folders([tmp_path / "plain"])


def test_cli_export_and_a_clear_error_for_a_wrong_folder(run_dir, tmp_path):
    output = tmp_path / "out" / "report.html"
    done = subprocess.run([sys.executable, "-m", "gym_compose", "view", "--export", str(output), str(run_dir)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert output.is_file() and f"wrote {output}" in done.stderr
    wrong = subprocess.run([sys.executable, "-m", "gym_compose", "view", str(tmp_path / "missing")],
                           capture_output=True, text=True, cwd=REPO, timeout=120)
    assert wrong.returncode == 2
    assert "run folder not found" in wrong.stderr and "Traceback" not in wrong.stderr


def test_rollout_lines_keep_the_collector_shape():
    record = rollout_record(3, 1)
    assert record["_ng_task_index"] == 3 and record["response"]["output"][0]["type"] == "function_call"
