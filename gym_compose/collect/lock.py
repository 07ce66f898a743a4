"""One writer per run folder: an exclusive `flock` on `<folder>/.writer.lock`, held while collecting.

The kernel drops a `flock` when its holder dies, however it dies, so a crashed collector's lock
is simply taken over; a live holder's lock is refused with a message naming it (pid, host,
container, project). The lock file sits in the run folder itself, which the collector container
bind-mounts: the host CLI and a collector in a container contend for the same lock.
"""

from __future__ import annotations

import fcntl
import os
import socket
import sys
from datetime import datetime, timezone
from pathlib import Path

import orjson

from gym_compose.contract import PROJECT_ENV  # set in the collector container by the rendered project
from gym_compose.errors import UserError

LOCK_FILE = ".writer.lock"


class RunFolderBusy(UserError):
    def __init__(self, folder: Path, holder: str):
        super().__init__(
            f"{folder} is being written by another collector: {holder}",
            hint="wait for it to finish, or stop it (`gym-compose down -p PROJECT` stops a project's "
            "collector) and run again; a dead collector's lock is taken over by itself",
        )


def holder_record() -> dict:
    """Who we are, as another process will read it in the refusal."""
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "in_container": Path("/.dockerenv").exists(),
        "project": os.environ.get(PROJECT_ENV),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def describe_holder(record: dict | None) -> str:
    if not record:
        return "a process that left no record"
    where = f"in container {record.get('host')}" if record.get("in_container") else f"on host {record.get('host')}"
    project = f" (project {record['project']})" if record.get("project") else ""
    return f"pid {record.get('pid')} {where}{project}, since {record.get('since')}"


def _read_record(fd: int) -> dict | None:
    try:
        data = os.pread(fd, 4096, 0)
        record = orjson.loads(data) if data.strip() else None
    except (OSError, orjson.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


class RunFolderLock:
    def __init__(self, folder: Path):
        self.folder = folder
        self.path = folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise RunFolderBusy naming its holder."""
        try:
            fd, writable = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), True
        except PermissionError:  # left by a collector that ran as another user: lock it all the same
            fd, writable = os.open(self.path, os.O_RDONLY), False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read_record(fd)
            os.close(fd)
            raise RunFolderBusy(self.folder, describe_holder(record)) from None
        except OSError as error:  # a file system without locks (some network shares)
            os.close(fd)
            print(f"collect: warning: cannot lock {self.path} ({error.strerror}); make sure no other "
                  "collector writes this folder", file=sys.stderr)
            return
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, orjson.dumps(holder_record()) + b"\n", 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> RunFolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def current_holder(folder: Path) -> str | None:
    """Who holds the folder's lock right now (None: nobody). Takes nothing: for a check up front."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return describe_holder(_read_record(fd))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
