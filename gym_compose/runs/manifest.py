"""What ran: `manifest.json` in the run folder, and the command line that continues a run."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gym_compose import __version__
from gym_compose.config import redact
from gym_compose.config.redact import MASK, is_secret_key
from gym_compose.engine.images import image_digest
from gym_compose.errors import UserError

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


def write_manifest(run_dir: Path, data: dict[str, Any], compose_file: Path | None, images: dict[str, str],
                   started_at: datetime, exit_code: int, record: dict[str, Any] | None = None) -> None:
    """The resolved config (redacted), the images and their ids, the command line, the exit code and
    a copy of the compose file that ran."""
    if compose_file is not None:
        shutil.copyfile(compose_file, run_dir / COMPOSE_COPY)
    digests: dict[str, dict[str, str | None]] = {}
    for service, tag in sorted(images.items()):
        try:
            digests[service] = {"image": tag, "id": image_digest(tag)}
        except UserError:
            digests[service] = {"image": tag, "id": None}
    manifest = {
        "gym_compose_version": __version__,
        "command": redacted_argv(sys.argv),
        "started_at": started_at.isoformat(timespec="seconds"),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "collector_exit_code": exit_code,
        "images": digests,
        "compose_file": COMPOSE_COPY if compose_file is not None else None,
        "resolved_config": redact(data),
    }
    if record is not None:
        from gym_compose.engine.engine_info import engine_versions
        from gym_compose.runs.provenance import provenance

        manifest["collection"] = record["collection"]
        manifest["provenance"] = provenance(data, record["collection"]["collector_args"], run_dir / "input.jsonl",
                                            record["datasets"], engine_versions())
        if record["rerun_of"]:
            manifest["rerun_of"] = record["rerun_of"]
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")


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
