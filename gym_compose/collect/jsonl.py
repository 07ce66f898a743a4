"""JSONL and JSON file I/O: strict reading, line-at-a-time appending, atomic replacing, torn-tail repair."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from gym_compose.errors import UserError


def read_input_lines(path: Path, limit: int | None = None) -> list[tuple[int, str, dict[str, Any]]]:
    """Parse every non-blank line of an input file as a JSON object: (line number, stripped text, row).

    Reads the whole file (up to `limit` rows) before returning, so a bad line stops the run
    before any rollout starts.
    """
    if not path.is_file():
        raise UserError(f"input file not found: {path}", hint="pass an existing JSONL file to --input")
    rows: list[tuple[int, str, dict[str, Any]]] = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            if limit is not None and len(rows) >= limit:
                break
            text = raw.strip()
            if not text:
                continue
            try:
                row = orjson.loads(text)
            except orjson.JSONDecodeError as error:
                raise UserError(
                    f"{path}, line {line_no}: not valid JSON ({error})",
                    hint="each line of the input must be one JSON object; fix or remove that line",
                ) from None
            if not isinstance(row, dict):
                raise UserError(
                    f"{path}, line {line_no}: expected a JSON object, got {type(row).__name__}",
                    hint="each line of the input must be one JSON object such as {\"responses_create_params\": {...}}",
                )
            rows.append((line_no, text.decode("utf-8", "replace"), row))
    return rows


def iter_output_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a file this collector wrote; a missing file has none. Run `repair_torn_tail` first."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            text = raw.strip()
            if not text:
                continue
            try:
                yield orjson.loads(text)
            except orjson.JSONDecodeError as error:
                raise UserError(
                    f"{path}, line {line_no}: not valid JSON ({error})",
                    hint="this file was written by the collector; an earlier line was damaged outside it."
                    " Move the file away to start over, or delete that line",
                ) from None


def repair_torn_tail(path: Path) -> int:
    """Make a file a crash cut short safe to read and append to; returns the bytes dropped.

    Only the text after the last newline can be torn (lines are written whole, then flushed).
    A complete JSON value there only lacks its newline and is kept; anything else is cut off.
    """
    if not path.exists():
        return 0
    with path.open("r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        tail_start = _start_of_last_line(f, size)
        f.seek(tail_start)
        tail = f.read()
        try:
            orjson.loads(tail)
        except orjson.JSONDecodeError:
            f.truncate(tail_start)
            return len(tail)
        f.write(b"\n")
        return 0


def _start_of_last_line(f, size: int) -> int:
    chunk_end = size
    while chunk_end > 0:
        chunk_start = max(0, chunk_end - (1 << 20))
        f.seek(chunk_start)
        newline_at = f.read(chunk_end - chunk_start).rfind(b"\n")
        if newline_at >= 0:
            return chunk_start + newline_at + 1
        chunk_end = chunk_start
    return 0


class JsonlAppender:
    """Appends one row per call and flushes it, so a crash loses only rows not yet handed over."""

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[bytes] | None = None

    def append(self, row: dict[str, Any]) -> None:
        if self._file is None:
            self._file = self.path.open("ab")
        self._file.write(orjson.dumps(row) + b"\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` so a reader sees the old or the new content, never a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_jsonl_atomically(path: Path, rows: list[dict[str, Any]]) -> None:
    write_atomically(path, b"".join(orjson.dumps(row) + b"\n" for row in rows))
