"""`POST /aggregate_metrics`: NeMo Gym 0.7's aggregation contract for resources servers and agents.

The collector (ours, or NeMo Gym's `gym eval run`) posts `{"verify_responses": [...]}` (the
rollouts of one environment server, heavy fields stripped) to the environment server each rollout
ran through; environment servers forward to their agent or resources server, agents to their
resources server, and the resources server answers `{agent_metrics, key_metrics,
group_level_metrics, repeat_level_metrics}`. A server customises the result with the hooks of
`AggregateMetricsHooks`: `compute_metrics(tasks)` (merged into `agent_metrics`; a
`per_task_metrics` list is merged into the matching `group_level_metrics` entries) and
`get_key_metrics(agent_metrics)` (the headline subset; default: the `mean/` entries).

The computation itself is `gym_compose.metrics.aggregate` (pure), which the collector also uses
for a server that has no such route.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pydantic import BaseModel, Field

if TYPE_CHECKING:  # imported where used: agents and environments only forward (docs/performance.md)
    from gym_compose.metrics.aggregate import Tasks

AGGREGATE_METRICS_PATH = "/aggregate_metrics"


class AggregateMetricsRequest(BaseModel):
    """The body of `/aggregate_metrics` (NeMo Gym's `config_types.AggregateMetricsRequest`)."""

    verify_responses: list[dict[str, Any]]


class AggregateMetrics(BaseModel):
    """The answer of `/aggregate_metrics` (NeMo Gym's `config_types.AggregateMetrics`)."""

    group_level_metrics: list[dict[str, Any]] = Field(default_factory=list)
    agent_metrics: dict[str, Any] = Field(default_factory=dict)
    key_metrics: dict[str, Any] = Field(default_factory=dict)
    perf_summary: Optional[dict[str, Any]] = None
    repeat_level_metrics: list[dict[str, Any]] = Field(default_factory=list)


class AggregateMetricsHooks:
    """The hooks NeMo Gym's `AggregateMetricsMixin` gives resources servers and agents; override to customise."""

    def compute_metrics(self, tasks: Tasks) -> dict[str, Any]:
        """Metrics over the whole run; `tasks[i]` holds the verify responses of task i. Merged into agent_metrics."""
        return {}

    def compute_repeat_metrics(self, tasks: Tasks) -> dict[str, Any]:
        """Accepted for NeMo Gym servers that define it; per-repeat summaries are not computed here."""
        return {}

    def get_key_metrics(self, agent_metrics: dict[str, Any]) -> dict[str, Any]:
        """The headline metrics: by default every `mean/` entry."""
        from gym_compose.metrics.aggregate import default_key_metrics

        return default_key_metrics(agent_metrics)

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        """What `/aggregate_metrics` answers; a server may override it whole (NeMo Gym's signature)."""
        from gym_compose.metrics.aggregate import compute_aggregate_metrics

        return AggregateMetrics.model_validate(
            compute_aggregate_metrics(body.verify_responses, self.compute_metrics, self.get_key_metrics,
                                      self.compute_repeat_metrics))


def aggregate_metrics_forwarding_route(server: Any, peer: str) -> Any:
    """A Starlette route relaying `/aggregate_metrics` to instance `peer`, body and status unchanged.

    NeMo Gym's environment servers forward to their agent (legacy_agent) or resources server
    (single_agent_turn), and its agents to their resources server, which owns the metrics.
    """
    from starlette.responses import Response
    from starlette.routing import Route

    async def endpoint(request: Any) -> Response:
        answer = await server.server_client.post(
            peer, AGGREGATE_METRICS_PATH, content=await request.body(),
            headers={"content-type": request.headers.get("content-type", "application/json")},
        )
        return Response(answer.body, status_code=answer.status,
                        media_type=answer.header("content-type") or "application/json")

    return Route(AGGREGATE_METRICS_PATH, endpoint, methods=["POST"])
