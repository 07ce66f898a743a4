"""A byte-offset index of a JSONL file that a collector may still be appending to.

`refresh()` reads only the bytes added since the last call, so a page reload during a run costs
the new lines, not the whole file. Lines are parsed once, summarized by a caller-given function
(the summary is all that stays in memory), and read again from disk by offset when a page asks
for one in full. The text after the last newline is a line still being written, or one a crash
left torn: it is summarized when it already parses, and read again next time either way.
A file that shrank or was replaced (a resume cut off a torn tail) is indexed from the start.

`summarize(line, side)` turns one line's bytes into the summary kept for it (raising ValueError
for a line that is not a JSON object) and may note facts shared by many lines in `side`, a dict
kept with the index (e.g. one prompt per task; the first line wins).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import orjson

T = TypeVar("T")
Summarize = Callable[[bytes, dict], Any]
READ_CHUNK = 32 << 20  # bytes read at a time, so a huge file never sits in memory whole


@dataclass
class BadLine:
    line_no: int
    error: str


@dataclass
class RangeResult:
    entries: list[Any]
    offsets: list[int]
    lines: int
    bad_lines: list[BadLine]
    side: dict


def index_lines(lines: list[bytes], base: int, summarize: Summarize, side: dict) -> RangeResult:
    """Summarize whole lines (each ending with a newline) that start at byte `base`."""
    result = RangeResult([], [], 0, [], side)
    offset = base
    for line in lines:
        result.lines += 1
        if len(line) > 1 and not line.isspace():
            try:
                result.entries.append(summarize(line, side))
                result.offsets.append(offset)
            except ValueError as error:  # not JSON, or not an object (orjson's and msgspec's errors are ValueErrors)
                result.bad_lines.append(BadLine(result.lines, str(error)))
        offset += len(line)
    return result


@dataclass
class JsonlIndex(Generic[T]):
    path: Path
    summarize: Summarize
    entries: list[T] = field(default_factory=list)  # summaries of the complete lines, in file order
    offsets: list[int] = field(default_factory=list)  # byte offset of each entry's line
    bad_lines: list[BadLine] = field(default_factory=list)
    side: dict = field(default_factory=dict)  # what summarize noted once for many lines
    generation: int = 0  # bumped whenever `all_entries()` may have changed
    _committed: int = 0  # bytes up to the last newline indexed
    _lines: int = 0
    _identity: tuple[int, int] | None = None  # (device, inode) of the file indexed
    _tail: tuple[int, T] | None = None  # (offset, summary) of a complete value not yet ended by a newline

    def all_entries(self) -> list[T]:
        """Every summary: complete lines, plus the unterminated last line when it parses."""
        return self.entries + [self._tail[1]] if self._tail else self.entries

    def offset_of(self, position: int) -> int:
        if position == len(self.offsets) and self._tail:
            return self._tail[0]
        return self.offsets[position]

    def __len__(self) -> int:
        return len(self.entries) + (1 if self._tail else 0)

    def refresh(self) -> bool:
        """Index what was appended since the last call; True when anything changed."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self._identity is None and not self.entries:
                return False
            self._reset(None)
            return True
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._committed:
            self._reset(identity)
        if stat.st_size == self._committed and self._tail is None:
            return False
        before = (len(self.entries), self._tail)
        with open(self.path, "rb") as f:
            self._read_from(f, stat.st_size)
        changed = (len(self.entries), self._tail) != before
        if changed:
            self.generation += 1
        return changed

    def read_record(self, position: int) -> dict[str, Any]:
        """The whole JSON object of entry `position`, read again from the file."""
        with open(self.path, "rb") as f:
            f.seek(self.offset_of(position))
            line = f.readline()
        return orjson.loads(line)

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self.entries, self.offsets, self.bad_lines, self.side = [], [], [], {}
        self._committed, self._lines, self._tail, self._identity = 0, 0, None, identity
        self.generation += 1

    def _merge(self, result: RangeResult, end: int) -> None:
        for bad in result.bad_lines:
            bad.line_no += self._lines
        self.entries.extend(result.entries)
        self.offsets.extend(result.offsets)
        self.bad_lines.extend(result.bad_lines)
        for key, value in result.side.items():
            self.side.setdefault(key, value)
        self._lines += result.lines
        self._committed = end

    def _read_from(self, f, size: int) -> None:
        self._tail = None
        f.seek(self._committed)
        while True:
            lines = f.readlines(READ_CHUNK)  # whole lines, about READ_CHUNK bytes of them
            if not lines:
                return
            last = lines[-1]
            if not last.endswith(b"\n"):  # the end of the file: a line still being written, or torn
                lines.pop()
                if lines:
                    self._merge(index_lines(lines, self._committed, self.summarize, self.side),
                                self._committed + sum(map(len, lines)))
                if last.strip():
                    try:
                        self._tail = (self._committed, self.summarize(last, self.side))
                    except ValueError:
                        pass  # not a complete value yet
                return
            self._merge(index_lines(lines, self._committed, self.summarize, self.side),
                        self._committed + sum(map(len, lines)))
