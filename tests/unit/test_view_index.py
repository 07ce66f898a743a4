"""The viewer's byte-offset index of a JSONL file that a collector may still be writing."""

from __future__ import annotations

import json

import orjson

from gym_compose.view.jsonl_index import JsonlIndex


def summarize(line: bytes, side: dict) -> int:
    record = orjson.loads(line)
    if not isinstance(record, dict):
        raise ValueError("not an object")
    side.setdefault("first", record["n"])
    return record["n"]


def line(n: int) -> str:
    return json.dumps({"n": n, "payload": "x" * n}) + "\n"


def test_refresh_reads_only_what_was_appended_and_reads_records_back_by_offset(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(line(n) for n in range(3)))
    index = JsonlIndex(path, summarize)
    assert index.refresh() is True
    assert index.all_entries() == [0, 1, 2]
    assert index.refresh() is False  # nothing new
    generation = index.generation
    with path.open("a") as f:
        f.write(line(3) + line(4))
    assert index.refresh() is True
    assert index.all_entries() == [0, 1, 2, 3, 4]
    assert index.generation > generation
    assert index.read_record(4) == {"n": 4, "payload": "xxxx"}
    assert index.side == {"first": 0}


def test_a_torn_last_line_is_left_out_until_it_is_complete(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    whole = line(7)
    path.write_text(line(1) + whole[:10])
    index = JsonlIndex(path, summarize)
    index.refresh()
    assert index.all_entries() == [1]
    assert index.bad_lines == []  # a line being written is not a bad line
    with path.open("a") as f:
        f.write(whole[10:])
    index.refresh()
    assert index.all_entries() == [1, 7]
    assert index.read_record(1)["n"] == 7


def test_a_complete_last_value_without_its_newline_counts_and_keeps_its_position(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(line(1) + line(2).rstrip("\n"))
    index = JsonlIndex(path, summarize)
    index.refresh()
    assert index.all_entries() == [1, 2]
    assert index.read_record(1)["n"] == 2
    with path.open("a") as f:
        f.write("\n" + line(3))
    index.refresh()
    assert index.all_entries() == [1, 2, 3]
    assert index.read_record(1)["n"] == 2


def test_a_file_cut_short_by_a_resume_is_indexed_again_from_the_start(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(line(1) + line(2) + line(3))
    index = JsonlIndex(path, summarize)
    index.refresh()
    path.write_text(line(1) + line(9))  # shorter: rewritten
    index.refresh()
    assert index.all_entries() == [1, 9]


def test_bad_lines_are_reported_with_their_line_numbers_and_the_rest_is_kept(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    path.write_text(line(1) + "{not json\n" + "\n" + "[1, 2]\n" + line(2))
    index = JsonlIndex(path, summarize)
    index.refresh()
    assert index.all_entries() == [1, 2]
    assert [bad.line_no for bad in index.bad_lines] == [2, 4]
    with path.open("a") as f:
        f.write("oops\n")
    index.refresh()
    assert [bad.line_no for bad in index.bad_lines] == [2, 4, 6]


def test_a_missing_file_is_empty_and_may_appear_later(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    index = JsonlIndex(path, summarize)
    assert index.refresh() is False
    assert len(index) == 0
    path.write_text(line(5))
    assert index.refresh() is True
    assert index.all_entries() == [5]


def test_lines_across_read_chunks_are_indexed_whole(tmp_path, monkeypatch):
    import gym_compose.view.jsonl_index as module

    monkeypatch.setattr(module, "READ_CHUNK", 7)  # smaller than one line
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(line(n) for n in range(20)))
    index = JsonlIndex(path, summarize)
    index.refresh()
    assert index.all_entries() == list(range(20))
    assert [index.read_record(i)["n"] for i in (0, 13, 19)] == [0, 13, 19]
