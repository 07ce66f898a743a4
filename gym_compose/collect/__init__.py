"""Rollout collection: one POST /run per row to the environment server fronting its agent.

Public API: `collect(config, options, progress=None) -> CollectResult`, `CollectOptions`,
`read_progress(output_dir)`. Entry: `python -m gym_compose.collect --input FILE --output-dir DIR`.
"""

from gym_compose.collect.collector import collect
from gym_compose.collect.options import CollectOptions, CollectResult
from gym_compose.collect.progress import read_progress

__all__ = ["collect", "CollectOptions", "CollectResult", "read_progress"]
