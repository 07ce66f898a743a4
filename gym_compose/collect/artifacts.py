"""NeMo Gym's artifact names for an output folder (its `-o rollouts.jsonl`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STEM = "rollouts"


@dataclass(frozen=True)
class ArtifactPaths:
    output_dir: Path

    @property
    def rollouts(self) -> Path:
        return self.output_dir / f"{STEM}.jsonl"

    @property
    def failures(self) -> Path:
        return self.output_dir / f"{STEM}_failures.jsonl"

    @property
    def materialized_inputs(self) -> Path:
        return self.output_dir / f"{STEM}_materialized_inputs.jsonl"

    @property
    def aggregate_metrics(self) -> Path:
        return self.output_dir / f"{STEM}_aggregate_metrics.json"

    @property
    def progress(self) -> Path:
        return self.output_dir / "progress.json"
