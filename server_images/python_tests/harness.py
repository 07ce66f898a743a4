"""The test harness python_tests runs inside a sandbox: it runs a candidate program against a
task's hidden tests and prints one JSON verdict line: {"passed": bool, "reason": str}.

Standard library only (it runs on the sandbox image's Python). Usage: `python3 -I harness.py JOB`,
where JOB is a JSON file {"prompt", "program", "test", "entry_point", "time_limit_s"}. The time
limit covers loading the program and every test call, not the interpreters' start-up; a program
past it is stopped and the verdict says so ("outcome": "timeout").

Two processes, so that the candidate never holds the tests:
- this process (the judge) reads JOB and deletes it before any candidate code runs, makes itself
  non-dumpable (its memory and /proc entries closed to the candidate, which runs as the same
  user), then runs the prompt (trusted: it defines the helpers the tests use) and the tests;
- the candidate process runs the program and answers calls over a pipe: the tests' `candidate`
  is a proxy that sends the arguments and gets the return value back, both as tagged JSON (plain
  data: numbers, strings, lists, tuples, dicts, sets), never as pickles.
The candidate's own stdout and stdin are /dev/null. Its process group is killed at the end,
with anything it forked. The sandbox bounds time, memory, processes and network.
"""

import builtins
import ctypes
import json
import linecache
import os
import signal
import subprocess
import sys
import traceback

CANDIDATE = r'''
import json, os, sys
channel_in = os.fdopen(os.dup(0), "r")
channel_out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
ENCODE, DECODE = None, None


def reply(message):
    channel_out.write(json.dumps(message) + "\n")
    channel_out.flush()


def described(error):
    return {"error": f"{type(error).__name__}: {error}", "type": type(error).__name__, "message": str(error)}


request = json.loads(channel_in.readline())
exec(request["codec"], globals())
reply({"started": True})  # the judge's clock starts here: interpreter start-up is not the program's time
namespace = {"__name__": "__candidate__"}
try:
    exec(compile(request["program"], "<candidate>", "exec"), namespace)
    function = namespace[request["entry_point"]]
except BaseException as error:
    reply(described(error))
    sys.exit(0)
reply({"ready": True})
for line in channel_in:
    call = json.loads(line)
    try:
        value = function(*decode(call["args"]), **decode(call["kwargs"]))
        reply({"value": encode(value)})
    except BaseException as error:
        reply(described(error))
'''

CODEC = r'''
def encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(item) for item in value]
    if isinstance(value, tuple):
        return {"t": [encode(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"s": [encode(item) for item in value]}
    if isinstance(value, dict):
        return {"d": [[encode(key), encode(item)] for key, item in value.items()]}
    raise TypeError(f"a value of type {type(value).__name__} cannot cross to the tests")


def decode(value):
    if isinstance(value, list):
        return [decode(item) for item in value]
    if isinstance(value, dict):
        if "t" in value:
            return tuple(decode(item) for item in value["t"])
        if "s" in value:
            return {decode(item) for item in value["s"]}
        return {decode(key): decode(item) for key, item in value["d"]}
    return value
'''

_codec: dict = {}
exec(CODEC, _codec)  # the same functions as the candidate's side, which gets CODEC as source
encode, decode = _codec["encode"], _codec["decode"]


class CandidateError(Exception):
    """The candidate raised, returned something that cannot cross, or its process ended."""


class OutOfTime(BaseException):
    """The program's time limit passed (SIGALRM); a BaseException, so no test's `except` swallows it."""


def out_of_time(signum, frame):
    raise OutOfTime()


def oom_kills() -> int:
    """The sandbox's count of processes the out-of-memory killer took (cgroup v2 or v1); 0 unknown."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as events:
                for line in events:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError):
            continue
    return 0


def make_non_dumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


class Candidate:
    def __init__(self, program: str, entry_point: str, time_limit_s: float):
        self.oom_kills_before = oom_kills()
        self.process = subprocess.Popen([sys.executable, "-I", "-c", CANDIDATE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        start_new_session=True)
        try:
            self._send({"codec": CODEC, "program": program, "entry_point": entry_point})
            self._answer()  # started
            signal.signal(signal.SIGALRM, out_of_time)
            signal.setitimer(signal.ITIMER_REAL, time_limit_s)  # loading the program and every test call
            self._answer()  # loaded
        except BaseException:
            self.close()
            raise

    def _send(self, message: dict) -> None:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reading side tells why

    def _answer(self, from_a_call: bool = False):
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            code = self.process.returncode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            if code == -signal.SIGKILL and oom_kills() > self.oom_kills_before:
                how = "was killed by the out-of-memory killer (the sandbox's memory limit)"
            raise CandidateError(f"the candidate's process {how}")
        try:
            answer = json.loads(line)
        except ValueError:
            raise CandidateError("the candidate's process broke the call protocol") from None
        if "error" in answer:
            kind = getattr(builtins, str(answer.get("type")), None)
            if from_a_call and isinstance(kind, type) and issubclass(kind, Exception) and kind is not AssertionError:
                raised = kind(answer.get("message", ""))  # a test may expect the candidate to raise ValueError etc.
                raised.from_candidate = answer["error"]
                raise raised
            raise CandidateError(f"the candidate raised {answer['error']}")
        return answer

    def __call__(self, *args, **kwargs):
        try:
            payload = {"args": encode(list(args)), "kwargs": {"d": [[k, encode(v)] for k, v in kwargs.items()]}}
        except TypeError as error:
            raise CandidateError(f"the tests passed an argument that cannot cross: {error}") from None
        self._send(payload)
        return decode(self._answer(from_a_call=True)["value"])

    def close(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the candidate and whatever it forked
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()


def failed_line(error: BaseException) -> str:
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == "<tests>"]
    return (frames[-1].line or "").strip()[:300] if frames else "an assertion"


def judge(job: dict) -> dict:
    limit = float(job.get("time_limit_s", 10))
    try:
        return run_tests(job, limit)
    except OutOfTime:
        return {"passed": False, "outcome": "timeout",
                "reason": f"the program ran past its time limit of {limit:g} s and was stopped"}


def run_tests(job: dict, limit: float) -> dict:
    tests: dict = {"__name__": "__tests__"}
    lines = job["test"].splitlines(keepends=True)
    linecache.cache["<tests>"] = (len(job["test"]), None, lines, "<tests>")  # a failed assert's line, in the reason
    exec(compile(job["prompt"], "<prompt>", "exec"), tests)
    exec(compile(job["test"], "<tests>", "exec"), tests)
    if "check" not in tests:
        return {"passed": False, "reason": "the task's tests define no check(candidate) function"}
    candidate = None
    try:
        candidate = Candidate(job["program"], job["entry_point"], limit)
    except CandidateError as error:
        return {"passed": False, "reason": f"the program did not load: {error}"}
    tests[job["entry_point"]] = candidate  # as in HumanEval's own harness, where a test may call it by name
    try:
        tests["check"](candidate)
    except AssertionError as error:
        return {"passed": False, "reason": "a test failed: " + (str(error) or failed_line(error))}
    except CandidateError as error:
        return {"passed": False, "reason": str(error)}
    except Exception as error:
        if getattr(error, "from_candidate", None):
            return {"passed": False, "reason": f"the candidate raised {error.from_candidate}"}
        return {"passed": False, "reason": f"a test failed: {type(error).__name__}: {error}"}
    finally:
        candidate.close()
    return {"passed": True, "reason": "every test passed"}


def main() -> None:
    make_non_dumpable()
    path = sys.argv[1]
    with open(path, encoding="utf-8") as source:
        job = json.load(source)
    os.unlink(path)  # gone before any candidate code runs
    verdict = judge(job)
    sys.stdout.write(json.dumps(verdict) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
