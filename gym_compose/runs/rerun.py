"""`gym-compose eval rerun RUN_DIR`: a finished run again, from its manifest alone, into a new
run folder: the same resolved config (secrets asked for again), the same images by id, the same
rows (the run folder's input.jsonl) and collector options. The manifest's docker settings get no
more than a fresh `up` gives (`rerun_policy`), and its collector options are checked like a
command line's.

An image of the manifest that is gone is named; with --rebuild (or a yes at the prompt) it is
built again from this checkout's recipe, which must be the same recipe: the image tags carry a
content hash, so the rebuilt tag must equal the recorded one, else the rerun stops and says which
commit to check out.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from gym_compose.config import ConfigRequest
from gym_compose.errors import UserError
from gym_compose.runs.rerun_config import INPUT_FILE, MANIFEST_FILE, masked_paths, read_manifest, rerun_config
from gym_compose.runs.rerun_policy import apply_rerun_policy, policy_report

RERUN_SUFFIX = "-rerun"


def recorded_images(manifest: dict[str, Any]) -> dict[str, tuple[str | None, str | None]]:
    """key (service, base, sandbox image key) -> (tag, id) as the run recorded them."""
    images = {}
    for key, entry in (manifest.get("images") or {}).items():
        if isinstance(entry, dict):
            images[key] = (entry.get("image"), entry.get("id"))
    return images


def split_overrides(overrides: list[str], manifest: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Overrides that fill a masked secret (`++path=value`, or a top-level secret's name) apart from
    the others, which change the config as in any command (and are recorded in the new manifest)."""
    masked = {".".join(path) for path in masked_paths(manifest["resolved_config"])}
    sources = {source for source in ((manifest.get("provenance") or {}).get("secrets") or {}).values() if source}
    secrets, others = {}, []
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and (key in masked or key in sources):
            secrets[key] = value
        else:
            others.append(override)
    return secrets, others


def pin_images(manifest: dict[str, Any], rebuild: bool, ask: bool) -> tuple[dict[str, str], dict[str, str]]:
    """(pinned: key -> the recorded image, by its tag while the tag still names the recorded id, else
    by id; to_rebuild: key -> recorded tag, for images gone from this engine)."""
    from gym_compose.engine.images.image_build import inspect_image

    pinned: dict[str, str] = {}
    missing: dict[str, tuple[str, str | None]] = {}
    for key, (tag, image_id) in recorded_images(manifest).items():
        tagged = inspect_image(tag) if tag else None
        if tag and tagged is not None and image_id and tagged.get("Id") == image_id:
            pinned[key] = tag  # the tag still names that very image: keep it (a rebuilt server's base hash uses it)
        elif image_id and inspect_image(image_id) is not None:
            pinned[key] = image_id
        elif tag:
            missing[key] = (tag, image_id)
    if not missing:
        return pinned, {}
    listing = "\n".join(f"  {key}: {tag} ({image_id or 'no id recorded'})"
                        for key, (tag, image_id) in sorted(missing.items()))
    if not rebuild and ask:
        print(f"these images of the run are gone:\n{listing}", file=sys.stderr)
        answer = input("build them again from the same recipe (checked by content hash)? [y/N] ")
        rebuild = answer.strip().lower() in ("y", "yes")
    if not rebuild:
        raise UserError(f"these images of the run are gone from this engine:\n{listing}",
                        hint="rerun with --rebuild to build them again from the same recipe (the tag's content "
                             "hash must match), or load the images (`docker load`) and rerun")
    return pinned, {key: tag for key, (tag, _) in missing.items()}


def check_rebuilt(images: dict[str, str], to_rebuild: dict[str, str], manifest: dict[str, Any]) -> None:
    """A rebuilt image must have the recorded tag: same content hash, same recipe."""
    changed = {key: (tag, images.get(key)) for key, tag in to_rebuild.items() if images.get(key) != tag}
    if changed:
        commit = ((manifest.get("provenance") or {}).get("gym_compose") or {}).get("commit")
        listing = "\n".join(f"  {key}: the run had {old}, this checkout builds {new}"
                            for key, (old, new) in changed.items())
        raise UserError("the recipe of these images changed since the run, so they cannot be built again "
                        "as they were:\n" + listing,
                        hint=f"check out the run's commit ({commit}) and rerun from there" if commit else
                        "check out the code the run used and rerun from there")


def rerun_name(run_dir: Path) -> str:
    """`gsm8k-20261130-212428` -> `gsm8k-rerun` (a rerun of a rerun keeps one suffix)."""
    parts = run_dir.name.split("-")
    if len(parts) >= 3 and parts[-2].isdigit() and parts[-1].isdigit():
        parts = parts[:-2]
    elif len(parts) >= 4 and parts[-3].isdigit() and parts[-2].isdigit() and parts[-1].isdigit():
        parts = parts[:-3]
    name = "-".join(parts) or "run"
    return name if name.endswith(RERUN_SUFFIX) else name + RERUN_SUFFIX


def rerun_command(run_dir: Path, options: Any, overrides: list[str], model_api_key: str | None,
                  results_dir: Path | None, run_name: str | None, keep: bool, rebuild: bool,
                  cwd: Path | None = None) -> int:
    from gym_compose.console import say
    from gym_compose.runs.eval_run import run_collection
    from gym_compose.runs.run_inputs import CollectionArgs
    from gym_compose.stack.lifecycle import StackArgs

    run_dir = run_dir.resolve()
    manifest = read_manifest(run_dir)
    given, other_overrides = split_overrides(overrides, manifest)
    if model_api_key is not None:
        given["policy_api_key"] = model_api_key
    config = rerun_config(manifest, given, (cwd or Path.cwd()))
    for line in policy_report(*apply_rerun_policy(config)):  # the manifest gets no more than a fresh `up`
        say(line)
    expressions = (manifest.get("provenance") or {}).get("environment") or {}
    if expressions:
        from gym_compose.config.host_environment import env_names

        names = sorted({name for text in expressions.values() if isinstance(text, str) for name in env_names(text)})
        say(f"rerun: {len(expressions)} value(s) the run took from its host's environment are taken from this "
            f"one's: {', '.join(names) or '(none named)'}")
    collection_record = manifest.get("collection") or {}
    pinned, to_rebuild = pin_images(manifest, rebuild, ask=sys.stdin.isatty())
    prompt = run_dir / "prompt_config.yaml"
    collection = CollectionArgs(
        results_dir=results_dir or run_dir.parent,
        input_file=run_dir / INPUT_FILE,
        run_name=run_name or rerun_name(run_dir),
        collector_args=list(collection_record.get("collector_args") or []),
        collector_args_from=f"{run_dir / MANIFEST_FILE}: collection.collector_args",
        num_repeats=collection_record.get("num_repeats"),
        prompt_config=prompt if collection_record.get("prompt_config") and prompt.is_file() else None,
    )
    say(f"rerunning {run_dir.name}: {len(pinned)} images by id"
        + (f", {len(to_rebuild)} to build again" if to_rebuild else ""))
    with tempfile.TemporaryDirectory(prefix="gym-compose-rerun-") as folder:
        config_file = Path(folder) / "config.yaml"  # holds the secrets again: only for the loader, 0600
        descriptor = os.open(config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            yaml.safe_dump(config, out, sort_keys=False, allow_unicode=True)
        request = ConfigRequest(config_files=[config_file], overrides=other_overrides)
        checked = (lambda images: check_rebuilt(images, to_rebuild, manifest)) if to_rebuild else None
        return run_collection(StackArgs(request, *options), collection, serve=True, keep=keep,
                              pinned_images=pinned, rerun_of=run_dir, check_images=checked)
