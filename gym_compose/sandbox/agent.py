"""The sandbox agent: one long-lived process inside each sandbox that runs the commands.

The broker starts it as the container's main process (under the container's init) with
`python3 -I -S -u -c <this file's source> [TTL_SECONDS]` and talks to it over the container's
attached stdin/stdout, so running a command costs one process spawn inside the sandbox, not a
container exec. Nothing here is imported by gym-compose: the file is sent as source text and
must run on any Python 3.6+ with the standard library only.

Wire format, both directions: frames of a 4-byte big-endian length and a UTF-8 JSON object.
The agent speaks first: `{"op": "hello", "version", "shell", "uid", "pid"}`. Requests carry an
`id` that the answer repeats:
- `exec`: command, cwd, env, timeout_s, max_output_bytes, shell -> return_code, stdout, stderr,
  timed_out, oom, truncated. A timed-out command's process group is killed; the agent lives on.
- `write`: path, data (base64), append, mode -> size. `read`: path, offset, length -> data, eof.
- `kill`: target (an exec id) -> killed. `ping` -> {}.
Stdin closing (the broker went away) or the time-to-live running out ends the agent, and with
it the sandbox.
"""

import base64
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">I")
READ_CHUNK = 65536
EXIT_POLL_S = 0.05
DRAIN_AFTER_EXIT_S = 0.2
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def find_shell():
    for path in ("/bin/bash", "/usr/bin/bash", "/bin/sh", "/usr/bin/sh"):
        if os.access(path, os.X_OK):
            return path
    return "sh"


def oom_kills():
    """The sandbox's cgroup OOM-kill counter (cgroup v2 or v1), or -1 when it cannot be read."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return -1


class Agent(object):
    def __init__(self, stdin_fd, stdout_fd):
        self.stdin_fd = stdin_fd
        self.stdout_fd = stdout_fd
        self.shell = find_shell()
        self.write_lock = threading.Lock()
        self.running = {}  # exec id -> Popen
        self.running_lock = threading.Lock()

    def send(self, message):
        data = json.dumps(message, separators=(",", ":")).encode("utf-8")
        frame = memoryview(HEADER.pack(len(data)) + data)
        with self.write_lock:
            while frame:
                frame = frame[os.write(self.stdout_fd, frame):]

    def read_exact(self, count):
        parts, missing = [], count
        while missing:
            chunk = os.read(self.stdin_fd, min(missing, 1 << 20))
            if not chunk:
                return None
            parts.append(chunk)
            missing -= len(chunk)
        return b"".join(parts)

    def serve(self):
        self.send({"op": "hello", "version": PROTOCOL_VERSION, "shell": self.shell, "uid": os.getuid(),
                   "pid": os.getpid()})
        while True:
            header = self.read_exact(HEADER.size)
            if header is None:
                return
            body = self.read_exact(HEADER.unpack(header)[0])
            if body is None:
                return
            try:
                request = json.loads(body.decode("utf-8"))
            except ValueError as error:
                self.send({"id": None, "ok": False, "error": "bad frame: %s" % error})
                continue
            op = request.get("op")
            if op == "exec":
                threading.Thread(target=self.answer, args=(request, self.run_command), daemon=True).start()
            elif op in ("write", "read", "kill", "ping"):
                self.answer(request, getattr(self, "op_" + op))
            else:
                self.send({"id": request.get("id"), "ok": False, "error": "unknown op %r" % (op,)})

    def answer(self, request, handler):
        try:
            result = handler(request)
            result.update({"id": request.get("id"), "ok": True})
        except Exception as error:  # every request gets an answer, whatever went wrong
            result = {"id": request.get("id"), "ok": False, "error": "%s: %s" % (type(error).__name__, error)}
        self.send(result)

    def run_command(self, request):
        limit = int(request.get("max_output_bytes") or 1 << 20)
        timeout = request.get("timeout_s")
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
        cwd = request.get("cwd") or None
        before = oom_kills()
        started = time.monotonic()
        try:
            process = subprocess.Popen([request.get("shell") or self.shell, "-c", request["command"]],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       cwd=cwd, env=env, start_new_session=True)
        except OSError as error:  # e.g. the working directory does not exist
            return {"return_code": 126, "stdout": "", "stderr": "%s\n" % error, "timed_out": False,
                    "oom": False, "truncated": False, "duration_s": 0.0}
        with self.running_lock:
            self.running[request.get("id")] = process
        try:
            outputs, truncated, timed_out = self.collect(process, limit, timeout, started)
        finally:
            with self.running_lock:
                self.running.pop(request.get("id"), None)
        code = process.returncode
        if code is not None and code < 0:
            code = 128 - code  # killed by a signal: the shell's convention
        oom = code == 137 and not timed_out and before >= 0 and oom_kills() > before
        return {"return_code": code, "stdout": outputs[0].decode("utf-8", "replace"),
                "stderr": outputs[1].decode("utf-8", "replace"), "timed_out": timed_out, "oom": oom,
                "truncated": truncated, "duration_s": round(time.monotonic() - started, 6)}

    def collect(self, process, limit, timeout, started):
        """Read both pipes (keeping `limit` bytes of each) until they close or the command ends;
        kill the process group when the timeout passes."""
        kept = {process.stdout.fileno(): bytearray(), process.stderr.fileno(): bytearray()}
        order = list(kept)
        truncated = timed_out = False
        selector = selectors.DefaultSelector()
        for fd in order:
            selector.register(fd, selectors.EVENT_READ)
        deadline = started + float(timeout) if timeout else None
        exited_at = None
        try:
            while selector.get_map():
                wait = EXIT_POLL_S
                if deadline is not None:
                    wait = min(wait, max(0.0, deadline - time.monotonic()))
                events = selector.select(wait)
                for key, _ in events:
                    chunk = os.read(key.fd, READ_CHUNK)
                    if not chunk:
                        selector.unregister(key.fd)
                        continue
                    buffer = kept[key.fd]
                    room = limit - len(buffer)
                    if room > 0:
                        buffer.extend(chunk[:room])
                    truncated = truncated or len(chunk) > room
                now = time.monotonic()
                if deadline is not None and now >= deadline and process.poll() is None:
                    self.kill_group(process)
                    timed_out = True
                    break
                if process.poll() is not None:
                    # It exited, but a background child holds the pipes open (and may write forever).
                    exited_at = exited_at or now
                    if not events or now - exited_at > DRAIN_AFTER_EXIT_S:
                        break
            for fd in list(selector.get_map()):
                os.set_blocking(fd, False)
                try:
                    chunk = os.read(fd, max(1, limit - len(kept[fd])))
                    kept[fd].extend(chunk[:max(0, limit - len(kept[fd]))])
                except (BlockingIOError, OSError):
                    pass
        finally:
            selector.close()
            process.stdout.close()
            process.stderr.close()
        if deadline is not None and not timed_out:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill_group(process)
                timed_out = True
        process.wait()
        return [bytes(kept[fd]) for fd in order], truncated, timed_out

    @staticmethod
    def kill_group(process):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass

    def op_write(self, request):
        path = request["path"]
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        data = base64.b64decode(request.get("data") or "")
        with open(path, "ab" if request.get("append") else "wb") as handle:
            handle.write(data)
            size = handle.tell()
        if request.get("mode") is not None:
            os.chmod(path, int(request["mode"]))
        return {"size": size}

    def op_read(self, request):
        offset, length = int(request.get("offset") or 0), int(request.get("length") or 1 << 20)
        with open(request["path"], "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(offset)
            data = handle.read(length)
        return {"data": base64.b64encode(data).decode("ascii"), "size": size, "eof": offset + len(data) >= size}

    def op_kill(self, request):
        with self.running_lock:
            process = self.running.get(request.get("target"))
        if process is not None:
            self.kill_group(process)
        return {"killed": process is not None}

    def op_ping(self, request):
        return {}


def main(argv):
    ttl = float(argv[1]) if len(argv) > 1 and argv[1] else 0.0
    if ttl > 0:
        timer = threading.Timer(ttl, os._exit, args=(3,))
        timer.daemon = True
        timer.start()
    # The protocol owns fd 1: anything a library prints goes to stderr instead.
    stdout_fd = os.dup(1)
    os.dup2(2, 1)
    Agent(0, stdout_fd).serve()
    os._exit(0)  # stdin closed: the broker is gone, and the sandbox goes with it


if __name__ == "__main__":
    main(sys.argv)
