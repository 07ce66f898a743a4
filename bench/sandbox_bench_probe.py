"""Runs inside the python_sandbox server container (`docker exec -i C python - ARGS < this`) and
measures sandboxes the way a server uses them: through gym_compose.sandbox and the broker.

    python - N_EXEC N_LEASES N_PARALLEL [cold|warm]   -> one JSON object on stdout

The burst of N_PARALLEL leases asks for a sandbox unlike the declared one (cold: each is started
for its lease) or, with `warm`, for the declared one once the warm pool holds N_PARALLEL ready
sandboxes (the server's `warm_pool` must be at least that).

While the burst's sandboxes are all leased it says `held` on stderr and keeps them until the host
creates RELEASE_FILE (or HOLD_TIMEOUT_S pass): the host measures their memory meanwhile.
"""

import asyncio
import json
import os
import sys
import time
import urllib.request

from gym_compose.sandbox import AsyncSandbox, SandboxSpec
from gym_compose.sandbox.client import BROKER_ENV, TOKEN_FILE_ENV
from gym_compose.sandbox.tokens import SERVER_HEADER

COLD = SandboxSpec(resources={"memory_mib": 255})  # differs from the declared sandbox: never from the warm pool
RELEASE_FILE = "/tmp/bench-release"
HOLD_TIMEOUT_S = 120.0


def stats() -> dict:
    request = urllib.request.Request(os.environ[BROKER_ENV] + "/v1/stats", headers={
        "authorization": "Bearer " + open(os.environ[TOKEN_FILE_ENV]).read().strip(),
        SERVER_HEADER: os.environ["NEMO_GYM_CONFIG_PATH"]})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


async def wait_warm(count: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while stats()["warm"] < count:
        if time.monotonic() > deadline:
            raise SystemExit("the warm pool did not refill")
        await asyncio.sleep(0.1)


async def timed_lease(spec: SandboxSpec) -> tuple[float, AsyncSandbox]:
    sandbox = AsyncSandbox()
    began = time.perf_counter()
    await sandbox.start(spec)
    return time.perf_counter() - began, sandbox


async def main(n_exec: int, n_leases: int, n_parallel: int, burst_from: str) -> dict:
    if burst_from == "warm":  # nothing is measured while the pool fills (its starts would load the machine)
        await wait_warm(n_parallel, timeout=600.0)
    warm_pool = stats()["warm"]
    warm, cold = [], []
    for _ in range(n_leases):
        await wait_warm(warm_pool)
        seconds, sandbox = await timed_lease(SandboxSpec())
        warm.append(seconds)
        await sandbox.stop()
    for _ in range(n_leases):
        seconds, sandbox = await timed_lease(COLD)
        cold.append(seconds)
        await sandbox.stop()
    sandbox = await AsyncSandbox().start(SandboxSpec())
    execs = []
    for _ in range(n_exec):
        began = time.perf_counter()
        result = await sandbox.exec("true")
        execs.append(time.perf_counter() - began)
        assert result.return_code == 0, result
    await sandbox.stop()
    spec = COLD
    if burst_from == "warm":
        await wait_warm(n_parallel, timeout=600.0)
        spec = SandboxSpec()
    began = time.perf_counter()
    outcomes = await asyncio.gather(*(timed_lease(spec) for _ in range(n_parallel)), return_exceptions=True)
    burst_s = time.perf_counter() - began
    burst = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    failures = [repr(outcome)[:300] for outcome in outcomes if isinstance(outcome, BaseException)]
    print("held", file=sys.stderr, flush=True)
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while not os.path.exists(RELEASE_FILE) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.gather(*(sandbox.stop() for _, sandbox in burst))
    refill = None
    if burst_from == "warm":  # the pool the burst emptied, full again: how fast the broker refills it
        began, warm_then = time.perf_counter(), stats()["warm"]
        await wait_warm(n_parallel, timeout=600.0)
        refill = {"started": n_parallel - warm_then, "seconds": time.perf_counter() - began}
    return {"warm_lease_s": warm, "cold_lease_s": cold, "exec_s": execs, "burst_n": n_parallel, "burst_from": burst_from,
            "burst_s": burst_s, "burst_lease_s": [seconds for seconds, _ in burst], "burst_failures": failures,
            "refill": refill,
            "broker": stats()}


print(json.dumps(asyncio.run(main(*(int(arg) for arg in sys.argv[1:4]), sys.argv[4] if len(sys.argv) > 4 else "cold"))))
