"""The registry of deployment targets: each row's renderer, file and options, and what a target
that gym-compose only renders answers when asked to run."""

import pytest

from gym_compose.engine.targets.registry import TARGETS, TargetOptions, target_named, target_options
from gym_compose.errors import UserError
from gym_compose.render.compose import COMPOSE_FILE
from gym_compose.render.kubernetes import MANIFESTS_FILE
from gym_compose.render.swarm import STACK_FILE


def test_each_row_names_the_file_its_renderer_writes():
    assert {name: row.rendered_file for name, row in TARGETS.items()} == {
        "compose": COMPOSE_FILE, "swarm": STACK_FILE, "kubernetes": MANIFESTS_FILE}


def test_options_are_checked_against_what_the_target_takes():
    assert target_options("swarm", "reg.example:5000/gym", ()) == TargetOptions("swarm", "reg.example:5000/gym")
    assert target_options("swarm", None, ("ssh://a@n2",)).node_engines == ("ssh://a@n2",)
    with pytest.raises(UserError, match="unknown --target 'nomad'") as unknown:
        target_options("nomad", None, ())
    assert "compose, swarm, kubernetes" in (unknown.value.hint or "")
    with pytest.raises(UserError, match="only for --target swarm or kubernetes"):
        target_options("compose", "reg.example/gym", ())
    with pytest.raises(UserError, match="only for --target swarm"):
        target_options("kubernetes", None, ("ssh://a@n2",))


def test_a_rendered_only_target_refuses_to_run_and_says_how_to_apply_it():
    kubernetes = target_named("kubernetes")
    assert not kubernetes.runs and target_named("compose").runs and target_named("swarm").runs
    for ask in (lambda: kubernetes.opened("p"), lambda: kubernetes.is_running("p")):
        with pytest.raises(UserError, match="rendered, not run") as refused:
            ask()
        assert "kubectl apply" in (refused.value.hint or "")
