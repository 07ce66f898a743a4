"""The sandbox agent as a local process: its wire protocol, and the promises the broker builds on
(a command's timeout kills its process group, background children do not hold a command's
answer, the agent ends when its stdin closes or its time-to-live runs out)."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys
import time

import pytest

from gym_compose.sandbox.broker.launch import AGENT_SOURCE

HEADER = struct.Struct(">I")


class Agent:
    def __init__(self, cwd, ttl: str = "0"):
        self.process = subprocess.Popen([sys.executable, "-I", "-S", "-u", "-c", AGENT_SOURCE, ttl], cwd=cwd,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.next_id = 0
        self.hello = self.read()

    def read(self) -> dict:
        size = HEADER.unpack(self.process.stdout.read(HEADER.size))[0]
        return json.loads(self.process.stdout.read(size))

    def send(self, op: str, **fields) -> int:
        self.next_id += 1
        data = json.dumps({"id": self.next_id, "op": op, **fields}).encode()
        self.process.stdin.write(HEADER.pack(len(data)) + data)
        self.process.stdin.flush()
        return self.next_id

    def call(self, op: str, **fields) -> dict:
        request_id = self.send(op, **fields)
        answer = self.read()
        assert answer["id"] == request_id
        return answer

    def close(self) -> int:
        self.process.stdin.close()
        return self.process.wait(timeout=30)


@pytest.fixture
def agent(tmp_path):
    running = Agent(tmp_path)
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def test_hello_names_the_shell_and_user(agent):
    assert agent.hello["op"] == "hello" and agent.hello["version"] == 1
    assert agent.hello["shell"].endswith(("bash", "sh")) and isinstance(agent.hello["uid"], int)


def test_exec_returns_code_and_both_streams(agent, tmp_path):
    answer = agent.call("exec", command="echo out; echo err >&2; pwd; exit 7", env={"X": "1"})
    assert answer["ok"] and answer["return_code"] == 7
    assert answer["stdout"] == f"out\n{tmp_path}\n" and answer["stderr"] == "err\n"
    assert agent.call("exec", command="echo $X", env={"X": "42"})["stdout"] == "42\n"
    assert agent.call("exec", command="kill -9 $$")["return_code"] == 137


def test_timeout_kills_the_whole_process_group(agent, tmp_path):
    marker = tmp_path / "survivor"
    started = time.monotonic()
    answer = agent.call("exec", command=f"(sleep 2; touch {marker}) & sleep 30", timeout_s=0.5)
    assert answer["timed_out"] and time.monotonic() - started < 10
    time.sleep(2.5)
    assert not marker.exists(), "a child of the timed-out command lived on"
    assert agent.call("exec", command="echo alive")["stdout"] == "alive\n"


def test_a_background_child_does_not_hold_the_answer(agent):
    started = time.monotonic()
    answer = agent.call("exec", command="sleep 20 & echo started")
    assert answer["return_code"] == 0 and answer["stdout"] == "started\n"
    assert time.monotonic() - started < 10


def test_a_background_child_that_writes_forever_does_not_hold_the_answer(agent):
    started = time.monotonic()
    # the foreground writes past the cap itself, so `truncated` does not hang on how soon `yes` runs
    answer = agent.call("exec", command="head -c 5000 /dev/zero; yes & echo started", max_output_bytes=1000)
    assert answer["return_code"] == 0 and answer["truncated"] and time.monotonic() - started < 10


def test_output_beyond_the_cap_is_read_and_dropped(agent):
    answer = agent.call("exec", command="head -c 3000000 /dev/zero; echo tail >&2", max_output_bytes=100)
    assert answer["return_code"] == 0 and answer["truncated"]
    assert len(answer["stdout"]) == 100 and answer["stderr"] == "tail\n"


def test_missing_working_directory_is_a_command_failure(agent, tmp_path):
    answer = agent.call("exec", command="true", cwd=str(tmp_path / "missing"))
    assert answer["ok"] and answer["return_code"] == 126 and "missing" in answer["stderr"]


def test_files_are_written_in_chunks_and_read_back(agent, tmp_path):
    data = bytes(range(256)) * 10
    agent.call("write", path=str(tmp_path / "d" / "f"), data=base64.b64encode(data[:1000]).decode(), mode=0o600)
    agent.call("write", path=str(tmp_path / "d" / "f"), data=base64.b64encode(data[1000:]).decode(), append=True)
    assert (tmp_path / "d" / "f").read_bytes() == data and (tmp_path / "d" / "f").stat().st_mode & 0o777 == 0o600
    part = agent.call("read", path=str(tmp_path / "d" / "f"), offset=2000, length=1000)
    assert base64.b64decode(part["data"]) == data[2000:2560] and part["eof"] and part["size"] == 2560
    missing = agent.call("read", path=str(tmp_path / "nope"))
    assert not missing["ok"] and "FileNotFoundError" in missing["error"]


def test_kill_stops_a_running_command(agent):
    running = agent.send("exec", command="sleep 30")
    time.sleep(0.3)
    killed = agent.send("kill", target=running)
    answers = {message["id"]: message for message in (agent.read(), agent.read())}
    assert answers[killed]["killed"] and answers[running]["return_code"] == 137


def test_unknown_op_and_bad_frame_are_answered(agent):
    assert not agent.call("teleport")["ok"]
    agent.process.stdin.write(HEADER.pack(3) + b"{{{")
    agent.process.stdin.flush()
    assert not agent.read()["ok"]
    assert agent.call("ping")["ok"]


def test_closing_stdin_ends_the_agent(agent):
    assert agent.close() == 0


def test_time_to_live_ends_the_agent(tmp_path):
    agent = Agent(tmp_path, ttl="0.5")
    assert agent.process.wait(timeout=30) == 3
