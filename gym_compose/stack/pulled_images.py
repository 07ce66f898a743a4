"""The task images a project's sandbox broker pulled, kept on the host past the stack's removal,
and their removal by `down --images`.

The broker's log names each image it pulled; the log goes with the broker's container, so every
removal of a stack (`down`, and the end of `up --benchmark` / `eval run`) first adds those images
to a list beside the project's folder (`PROJECT.pulled-images`), which `down --images` reads,
empties and removes. Images that were on the engine before a run, the images gym-compose built
and those `build --pull` pulled are never on it.
"""

from __future__ import annotations

from pathlib import Path

from gym_compose.console import say
from gym_compose.engine.targets.deployed_stack import DeployedStack
from gym_compose.stack.state import state_dir

SUFFIX = ".pulled-images"


def ledger_path(project: str) -> Path:
    return state_dir() / "projects" / f"{project}{SUFFIX}"


def remembered(project: str) -> list[str]:
    path = ledger_path(project)
    return sorted({line.strip() for line in path.read_text().splitlines() if line.strip()}) if path.is_file() else []


def remember_pulled_images(stack: DeployedStack) -> None:
    """Before the stack's containers go: add what its brokers pulled on this engine to the ledger
    (Kubernetes' kubelet collects its own images). A failure to read or write it is a warning
    (the removal matters more)."""
    from gym_compose.engine.targets.sandbox_containers import pulled_task_images

    if stack.sandbox_backend != "docker":
        return
    project = stack.name
    try:
        pulled = pulled_task_images(project)
        if pulled:
            path = ledger_path(project)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{image}\n" for image in sorted(set(remembered(project)) | set(pulled))))
    except Exception as error:  # noqa: BLE001 - never in the way of a removal
        say(f"warning: could not record the task images project {project!r} pulled ({error}); "
            "`down --images` will not know them")


def remove_pulled_images(project: str) -> None:
    """`down --images`: remove the ledger's images (none that a container uses), then the ledger."""
    from gym_compose.engine.targets.sandbox_containers import remove_task_images

    pulled = remembered(project)
    if not pulled:
        say(f"project {project!r}: no task image pulled by its sandbox broker is on record")
        return
    outcome = remove_task_images(pulled)
    said = f"removed {len(outcome.removed)} task image(s) that project {project!r}'s sandbox broker pulled"
    if outcome.gone:
        said += f"; {len(outcome.gone)} were gone already (the image budget removes them during a run)"
    say(said)
    for image, why in sorted(outcome.in_use.items()):
        say(f"  kept {image}: {why}")
    kept = sorted(outcome.in_use)
    if kept:
        ledger_path(project).write_text("".join(f"{image}\n" for image in kept))  # `down --images` tries again
    else:
        ledger_path(project).unlink(missing_ok=True)
