"""What a collection run is asked to do, and what it reports back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# NeMo Gym leaves both concurrency bounds unset by default ("admit everything"); a pool of
# this many workers is what "unbounded" means here, so one host never opens 10k sockets.
UNBOUNDED_CONCURRENCY = 512
MAX_ATTEMPTS = 3


@dataclass
class CollectOptions:
    input_path: Path
    output_dir: Path
    limit: int | None = None
    num_repeats: int = 1
    resume: bool = False
    num_samples_in_parallel: int | None = None
    max_resident_rollout_tasks: int | None = None
    retain_results_in_memory: bool = True
    disable_aggregation: bool = False
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    prompt_config_path: Path | None = None
    agent_name: str | None = None  # --agent: agent_map._default
    agent_map: dict[str, str] | None = None  # the effective map (collect/agent_map.py); None: only agent_name
    request_timeout_s: float = 3600.0
    max_attempts: int = MAX_ATTEMPTS
    host_lease: bool = False  # stdin is the host's lease (see collect/lease.py)

    def responses_create_params_overrides(self) -> dict[str, Any]:
        overrides = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_output_tokens": self.max_output_tokens,
        }
        return {key: value for key, value in overrides.items() if value is not None}

    def concurrency(self, pending: int) -> int:
        """How many rollouts may be in flight at once: the lower of both bounds."""
        bounds = [b for b in (self.num_samples_in_parallel, self.max_resident_rollout_tasks) if b]
        limit = min(bounds) if bounds else UNBOUNDED_CONCURRENCY
        return max(1, min(limit, pending)) if pending else 1


@dataclass
class CollectResult:
    total: int
    succeeded: int
    failed: int
    skipped: int
    output_dir: Path
    elapsed_s: float
    results: list[dict[str, Any]] = field(default_factory=list)
    aggregate_metrics: list[dict[str, Any]] | None = None
    stopped: bool = False  # stopped from outside before every rollout ran
    stop_reason: str | None = None

    @property
    def exit_code(self) -> int:
        if self.stopped and self.stop_reason is None:
            return 130  # the host let go of us (Ctrl-C, or it died)
        return 0 if self.failed == 0 else 1

    def summary(self) -> str:
        stopped = ""
        if self.stopped:
            stopped = f"; stopped early ({self.stop_reason or 'the host let go'}), rerun with --resume for the rest"
        return (
            f"collect: {self.succeeded}/{self.total} rollouts succeeded, {self.failed} failed or not run"
            f" ({self.skipped} already done before this run) in {self.elapsed_s:.1f} s; see {self.output_dir}{stopped}"
        )
