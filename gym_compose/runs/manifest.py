"""What ran: `manifest.json` in the run folder, and the command line that continues a run."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gym_compose import __version__
from gym_compose.config import redact
from gym_compose.config.redact import MASK, is_secret_key, mask_paths
from gym_compose.engine.images.image_build import inspect_images
from gym_compose.errors import GymComposeError
from gym_compose.runs.summary import cost_totals

MANIFEST_FILE = "manifest.json"
COMPOSE_COPY = "compose.yaml"


def run_record(planned: Any, collection: Any, rerun_of: Path | None) -> dict[str, Any]:
    """What the manifest records beside the config: the collection as a rerun repeats it and the
    datasets to hash (the rows are hashed, the engine asked, when the manifest is written)."""
    from gym_compose.runs.provenance import collection_record

    args = planned.collector_args
    repeats = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--num-repeats"), None)
    return {"collection": collection_record(list(collection.collector_args), int(repeats) if repeats else None,
                                            collection.prompt_config is not None),
            "datasets": [dataset.path for dataset in planned.datasets],
            "rerun_of": str(rerun_of.resolve()) if rerun_of else None}


class EngineFacts:
    """The manifest's parts that the engine must be asked for (each image's id, the engine's
    versions), asked in a background thread from the moment the images are known, so that the
    collector need not wait for them nor the manifest after it. The tags are content hashes: the
    ids cannot change while the run goes on."""

    def __init__(self, images: dict[str, str], with_engine: bool = True):
        self._images = dict(images)
        self._with_engine = with_engine
        self._found: tuple[dict[str, dict[str, str | None]], dict[str, Any] | None] | None = None
        self._thread = threading.Thread(target=self._ask, name="manifest-engine-facts", daemon=True)
        self._thread.start()

    def _ask(self) -> None:
        try:
            self._found = self._asked()
        except Exception:  # noqa: BLE001 - asked again, in the foreground, by result()
            self._found = None

    def _asked(self) -> tuple[dict[str, dict[str, str | None]], dict[str, Any] | None]:
        tags = sorted(set(self._images.values()))  # several services share one image
        try:
            found = inspect_images(tags)  # one engine call for all
        except GymComposeError:
            found = {}
        ids: dict[str, str | None] = {tag: (found.get(tag) or {}).get("Id") for tag in tags}
        digests = {service: {"image": tag, "id": ids[tag]} for service, tag in sorted(self._images.items())}
        if not self._with_engine:
            return digests, None
        from gym_compose.engine.engine_info import engine_versions

        return digests, engine_versions()

    def result(self) -> tuple[dict[str, dict[str, str | None]], dict[str, Any] | None]:
        """(service -> {"image", "id"}, the engine's versions or None when not asked for)."""
        self._thread.join()
        return self._found if self._found is not None else self._asked()


def write_manifest(run_dir: Path, data: dict[str, Any], compose_file: Path | None, images: dict[str, str],
                   started_at: datetime, exit_code: int, record: dict[str, Any] | None = None,
                   facts: EngineFacts | None = None,
                   from_environment: dict[tuple[str, ...], str] | None = None) -> None:
    """The resolved config (redacted), the images and their ids, the command line, the exit code and
    a copy of the compose file that ran. `facts`: the engine's answers already asked for (of these
    `images`); without it they are asked now. `from_environment`: the values the host's environment
    gave (`LoadedConfig.from_environment`), masked like secrets, their expressions recorded."""
    from_environment = from_environment or {}
    if compose_file is not None:
        copy_compose_file(compose_file, run_dir / COMPOSE_COPY, from_environment)
    if facts is None:
        facts = EngineFacts(images, with_engine=record is not None)
    digests, engine = facts.result()
    manifest = {
        "gym_compose_version": __version__,
        "command": redacted_argv(sys.argv),
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "collector_exit_code": exit_code,
        "images": digests,
        "compose_file": COMPOSE_COPY if compose_file is not None else None,
        "resolved_config": redact(data, from_environment),
    }
    totals = cost_totals(run_dir)
    if totals:  # the servers keep a ledger (docs/sandboxes.md#what-a-rollout-cost)
        manifest["cost"] = totals
    if record is not None:
        from gym_compose.engine.engine_info import engine_versions
        from gym_compose.runs.provenance import provenance

        if engine is None:
            engine = engine_versions()

        manifest["collection"] = record["collection"]
        recorded = provenance(data, record["collection"]["collector_args"], run_dir / "input.jsonl",
                              record["datasets"], engine)
        if from_environment:  # the expressions name variables, never their values: a rerun evaluates them again
            recorded["environment"] = {".".join(path): text for path, text in sorted(from_environment.items())}
        manifest["provenance"] = recorded
        if record["rerun_of"]:
            manifest["rerun_of"] = record["rerun_of"]
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")


def copy_compose_file(compose_file: Path, target: Path, from_environment: dict[tuple[str, ...], str]) -> None:
    """The compose file, for the run folder; the config every container gets (in its environment)
    with the values the host's environment gave masked, as in the manifest."""
    if not from_environment:
        shutil.copyfile(compose_file, target)
        return
    import yaml

    from gym_compose.contract import CONFIG_DICT_ENV, HEAD_VIEW_ENV, INSTANCE_LABEL
    from gym_compose.render.compose import dump_yaml

    model = yaml.safe_load(compose_file.read_text(encoding="utf-8"))
    for service in (model.get("services") or {}).values():
        environment = service.get("environment")
        if not isinstance(environment, dict):
            continue
        for name in (CONFIG_DICT_ENV, HEAD_VIEW_ENV):
            if isinstance(environment.get(name), str):
                config = yaml.safe_load(environment[name])
                if isinstance(config, dict):
                    environment[name] = yaml.safe_dump(mask_paths(config, from_environment), sort_keys=False)
        # a server's `docker.environment` values are its container's variables, in compose.yaml as they are
        instance = (service.get("labels") or {}).get(INSTANCE_LABEL)
        for path in from_environment:
            if path[0] == instance and path[3:5] == ("docker", "environment") and len(path) > 5:
                if path[5] in environment:
                    environment[path[5]] = MASK
    target.write_text(dump_yaml(model), encoding="utf-8")


def resume_command(argv: list[str]) -> str:
    """The command line that continues this run: the same one with --resume (secrets masked)."""
    shown = ["gym-compose", *redacted_argv(argv[1:])]
    if "--resume" not in shown:
        shown.append("--resume")
    return " ".join(shown)


def redacted_argv(argv: list[str]) -> list[str]:
    """The command line with secret values (--model-api-key X, ++policy_api_key=X) masked."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(MASK)
            hide_next = False
        elif arg == "--model-api-key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--model-api-key="):
            shown.append(f"--model-api-key={MASK}")
        elif "=" in arg and is_secret_key(arg.split("=", 1)[0].lstrip("+~").rsplit(".", 1)[-1]):
            shown.append(arg.split("=", 1)[0] + "=" + MASK)
        else:
            shown.append(arg)
    return shown
