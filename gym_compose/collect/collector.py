"""A collection run: materialize rows, skip what earlier runs did, run the rest concurrently, write artifacts."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson

from gym_compose.collect.artifacts import ArtifactPaths
from gym_compose.collect.dispatch import run_rollout, stopped_failure_row
from gym_compose.collect.jsonl import (
    JsonlAppender,
    iter_output_rows,
    read_input_lines,
    write_atomically,
    write_jsonl_atomically,
)
from gym_compose.collect.lease import RunStop, watch_lease
from gym_compose.collect.lock import RunFolderLock
from gym_compose.collect.options import CollectOptions, CollectResult
from gym_compose.collect.progress import ProgressTracker, run_id_for
from gym_compose.collect.prompt import load_prompt_config
from gym_compose.collect.resume import PriorRuns, load_prior_runs
from gym_compose.collect.routing import RoutingTable, routing_table_from_config
from gym_compose.collect.rows import materialize_rows
from gym_compose.collect.server_metrics import aggregate_through_servers, stripped
from gym_compose.errors import UserError
from gym_compose.metrics.row_keys import ATTEMPT_INDEX, first_of_each_rollout, rollout_key, sortable_rollout_key
from gym_compose.net.http_client import HttpClient

ProgressCallback = Callable[[dict[str, Any]], None]


def collect(config: dict[str, Any], options: CollectOptions, progress: ProgressCallback | None = None) -> CollectResult:
    """Run every rollout of `options.input_path` against the servers in `config` (NeMo Gym's config dict).

    Raises UserError for bad input before any rollout starts, and RunFolderBusy while another
    collector writes the same folder. `progress` gets each progress.json snapshot.
    """
    routing = routing_table_from_config(config)
    if not routing.servers:
        raise UserError("the config has no environment servers, so there is nowhere to send rows",
                        hint="NEMO_GYM_CONFIG_DICT must hold the in-network config of the stack")
    options.output_dir.mkdir(parents=True, exist_ok=True)
    with RunFolderLock(options.output_dir):
        return _collect(routing, options, progress)


def _collect(routing: RoutingTable, options: CollectOptions, progress: ProgressCallback | None) -> CollectResult:
    started = time.monotonic()
    paths = ArtifactPaths(options.output_dir)
    if options.resume and paths.materialized_inputs.exists():
        rows = list(iter_output_rows(paths.materialized_inputs))
        print(f"collect: resuming the {len(rows)} rollouts of {paths.materialized_inputs}"
              " (the input file and row options are not read again)", file=sys.stderr)
        for index, row in enumerate(rows, 1):
            routing.server_for_row(row, f"{paths.materialized_inputs}, line {index}")
        prior = load_prior_runs(paths)
    else:
        _refuse_to_overwrite(paths, options.resume)
        rows = _materialize(options, routing)
        prior = load_prior_runs(paths) if options.resume else PriorRuns()
        write_jsonl_atomically(paths.materialized_inputs, rows)

    pending = []
    for row in rows:
        key = rollout_key(row)
        if prior.attempts_left(key, options.max_attempts):
            attempt = prior.failed_attempts[key]
            pending.append({**row, ATTEMPT_INDEX: attempt} if attempt else row)
    run_id = run_id_for(options.output_dir, options.resume)  # before the tracker rewrites progress.json
    tracker = ProgressTracker(options.output_dir, total=len(rows), run_id=run_id,
                              done_before=len(prior.done & {rollout_key(r) for r in rows}),
                              reward_sum_before=prior.reward_sum, rewarded_before=prior.rewarded, callback=progress)
    tracker.write()
    results: list[dict[str, Any]] = []
    rollouts, failures = JsonlAppender(paths.rollouts), JsonlAppender(paths.failures)
    stop = RunStop()
    try:
        _run_on_fast_loop(_run_all(pending, routing, options, rollouts, failures, tracker,
                                   results if options.retain_results_in_memory else None, stop))
    finally:
        rollouts.close()
        failures.close()
        tracker.write(finished=True)

    metrics = None
    if not options.disable_aggregation:
        # A stopped run is resumed later: its servers are not sent every rollout so far (a body
        # that grows with the run: at 75,000 rollouts it got a 512 MiB resources server OOM-killed
        # at each stop, bench/bench_soak.py); the metrics are computed here until the run is whole.
        if stop.requested:
            print("collect: the run stopped early: its metrics are computed here, without the servers'"
                  " compute_metrics (they are asked once the run is complete)", file=sys.stderr)
        metrics = aggregate_through_servers(finished_for_metrics(paths.rollouts), rows, routing,
                                            repeated=options.num_repeats > 1, ask_servers=not stop.requested)
        write_atomically(paths.aggregate_metrics, orjson.dumps(metrics, option=orjson.OPT_INDENT_2))
    results.sort(key=sortable_rollout_key)
    return CollectResult(total=len(rows), succeeded=tracker.done, failed=len(rows) - tracker.done,
                         skipped=len(rows) - len(pending), output_dir=options.output_dir,
                         elapsed_s=time.monotonic() - started, results=results, aggregate_metrics=metrics,
                         stopped=stop.requested, stop_reason=stop.reason)


def finished_for_metrics(rollouts: Path) -> list[dict[str, Any]]:
    """Each finished rollout once (whatever a file written twice holds), as /aggregate_metrics
    takes it: stripped as it is read, so memory follows the rollouts' count, not their size
    (100,000 whole rollouts outgrew the collector's 1 GiB limit: bench/bench_soak.py)."""
    return first_of_each_rollout(stripped(row) for row in iter_output_rows(rollouts))


def _materialize(options: CollectOptions, routing: RoutingTable) -> list[dict[str, Any]]:
    prompt = load_prompt_config(options.prompt_config_path) if options.prompt_config_path else None
    input_rows = read_input_lines(options.input_path, options.limit)
    return materialize_rows(input_rows, options.input_path, options, routing, prompt)


def _refuse_to_overwrite(paths: ArtifactPaths, resume: bool) -> None:
    if resume:
        return
    if paths.rollouts.exists() and paths.rollouts.stat().st_size > 0:
        raise UserError(f"{paths.output_dir} already holds rollouts from an earlier run",
                        hint="pass --resume to finish that run, or choose an empty --output-dir")


def _run_on_fast_loop(main: Coroutine[Any, Any, None]) -> None:
    """uvloop when the image has it (it does: uvicorn's); it halves the event loop's cost per request."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


async def _run_all(pending, routing: RoutingTable, options: CollectOptions, rollouts: JsonlAppender,
                   failures: JsonlAppender, tracker: ProgressTracker, results: list | None, stop: RunStop) -> None:
    """A pool of workers over one shared queue: the pool size bounds both admitted and in-flight rollouts.

    The workers share one keep-alive client (the servers' own, gym_compose.net.http_client): a
    POST costs it a fraction of httpx's CPU, and its pool takes an idle connection in O(1).
    """
    workers = options.concurrency(len(pending))
    client = HttpClient(timeout=options.request_timeout_s, connect_timeout=min(30.0, options.request_timeout_s))
    queue = iter(pending)

    async def worker() -> None:
        for row in queue:
            if stop.requested:
                break
            server = routing.server_for_row(row, "materialized row")
            try:
                with stop.rollout():
                    outcome, record = await run_rollout(client, server, row, tracker.run_id)
            except asyncio.CancelledError:
                if not stop.requested:
                    raise
                asyncio.current_task().uncancel()  # handled: the run ends normally, its files closed
                if stop.reason is not None:  # the host saw a server die: this rollout died with it
                    failures.append(stopped_failure_row(row, server, stop.reason))
                    tracker.record_failure()
                break
            if outcome == "ok":
                rollouts.append(record)
                tracker.record_success(record)
                if results is not None:
                    results.append(record)
            else:
                failures.append(record)
                tracker.record_failure()

    if options.host_lease:
        watch_lease(stop, asyncio.get_running_loop())
    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        await client.aclose()
