"""Option groups that several commands share, injected into their typer signatures.

`@with_config` gives a command NeMo Gym's config arguments (`--config`, the selectors, `-m`, ...
and the Hydra overrides left over) as one `request: ConfigRequest`; `@with_stack` adds the
stack options as `stack: StackFlags` (the plan's, the target's); `@with_collection` adds the collection options
as `collection: CollectionArgs`. Typer reads a command's signature, so each decorator swaps its
one parameter for the group's options there and folds them back into one value on the call.
"""

from __future__ import annotations

import functools
import inspect
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, NamedTuple, Optional

import typer

from gym_compose.config.model_fill import is_named_model
from gym_compose.config.request import ConfigRequest
from gym_compose.contract import HEAD_PORT, MAX_PROJECT, PROJECT_ENV
from gym_compose.errors import UserError

if TYPE_CHECKING:
    from gym_compose.engine.targets.registry import TargetOptions
    from gym_compose.plan.model import StackOptions

STACK_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True}


def _option(annotation: Any, *flags: str, help: str, **extra: Any) -> Any:
    return Annotated[annotation, typer.Option(*flags, help=help, **extra)]


CONFIG_OPTIONS: dict[str, tuple[Any, Any]] = {
    "config": (_option(Optional[list[Path]], "--config", metavar="FILE", help="A config file; repeatable. Loads before selector files."), None),
    "resources_server": (_option(Optional[list[str]], "--resources-server", metavar="NAME[/FLAVOR]", help="Resources server NAME or NAME/FLAVOR; repeatable."), None),
    "model_type": (_option(Optional[list[str]], "--model-type", metavar="NAME[/FLAVOR]", help="Model server type NAME or NAME/FLAVOR (default: mock_model)."), None),
    "agent_type": (_option(Optional[list[str]], "--agent-type", metavar="NAME[/FLAVOR]", help="Agent server type NAME or NAME/FLAVOR."), None),
    "benchmark": (_option(Optional[list[str]], "--benchmark", metavar="NAME[/FLAVOR]", help="Benchmark NAME or NAME/FLAVOR; repeatable."), None),
    "environment": (_option(Optional[list[str]], "--environment", metavar="NAME[/FLAVOR]", help="Environment NAME or NAME/FLAVOR."), None),
    "model": (_option(
        Optional[list[str]], "--model", "-m", metavar="NAME | INSTANCE=URL[,model=NAME][,api_key=KEY] | INSTANCE=mock",
        help="NAME sets policy_model_name. INSTANCE=URL serves the model instance INSTANCE (a judge, a user "
        "simulator, ...) from an OpenAI-compatible endpoint; INSTANCE=mock with the built-in mock, whatever its "
        "config names; repeatable. A model a server names that has no endpoint is served by the built-in mock "
        "(docs/models.md).",
    ), None),
    "model_url": (_option(Optional[str], "--model-url", metavar="URL", help="Sets policy_base_url."), None),
    "model_api_key": (_option(Optional[str], "--model-api-key", metavar="KEY", help="Sets policy_api_key (kept secret)."), None),
    "search_dir": (_option(
        Optional[list[Path]], "--search-dir", metavar="DIR",
        help="Extra root where selectors resolve with NeMo Gym's relative paths (e.g. a NeMo Gym checkout); "
        "repeatable. Also read from GYM_COMPOSE_SEARCH_PATH (':'-separated).",
    ), None),
}

PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def exec_arguments(project: str, words: list[str]) -> tuple[str, list[str]]:
    """`sandbox exec SANDBOX [-p NAME] [--] CMD...`: the options given after SANDBOX (the parser
    stops at SANDBOX, so that CMD's own options stay CMD's) and the command; -p/--project there
    is gym-compose's, as before SANDBOX."""
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-p", "--project"):
            if index + 1 >= len(words):
                raise UserError(f"{word} needs a project name", hint="e.g. gym-compose sandbox exec SANDBOX -p NAME -- ls")
            project, index = _checked_project_name(words[index + 1]), index + 2
        elif word.startswith("--project="):
            project, index = _checked_project_name(word.split("=", 1)[1]), index + 1
        elif word == "--":
            return project, words[index + 1:]
        elif word.startswith("-") and "--" in words[index:]:
            raise UserError(f"unknown option {word!r} before `--`",
                            hint="options of sandbox exec go before `--` (only -p/--project), the command after it")
        else:
            break
    return project, words[index:]


def _checked_project_name(project: str) -> str:
    if not PROJECT_NAME.fullmatch(project):
        raise UserError(
            f"invalid project name {project!r}",
            hint="use lowercase letters, digits, '-' and '_', starting with a letter or digit (Compose's rule)",
        )
    return project


PROJECT_OPTION = _option(str, "--project", "-p", metavar="NAME", envvar=PROJECT_ENV,
                         callback=_checked_project_name, help=f"Compose project name (at most {MAX_PROJECT} characters, so every name made from it fits: docs/deploy.md#names).")
DEFAULT_PROJECT = "gym-compose"

STACK_OPTIONS: dict[str, tuple[Any, Any]] = {
    "project": (PROJECT_OPTION, DEFAULT_PROJECT),
    "publish": (_option(bool, "--publish", help="Also publish every server on the --bind address (head: --head-port, others: the ports after it)."), False),
    "head_port": (_option(int, "--head-port", metavar="PORT", help="Host port the head is published on (127.0.0.1)."), HEAD_PORT),
    "bind": (_option(str, "--bind", metavar="ADDRESS", help="Host address the head and published servers listen on (default 127.0.0.1; 0.0.0.0 for a trainer on another node: docs/training.md)."), "127.0.0.1"),
    "advertise_host": (_option(Optional[str], "--advertise-host", metavar="HOST", help="Address the head's host view names for the published servers (default: the --bind address; 127.0.0.1 for 0.0.0.0). A trainer elsewhere: this machine's IP."), None),
    "target": (_option(str, "--target", metavar="TARGET", help="Where the stack runs: compose (this machine), swarm (`docker stack deploy`), kubernetes (render only). See docs/deploy.md."), "compose"),
    "registry": (_option(Optional[str], "--registry", metavar="HOST/PREFIX", help="swarm/kubernetes: tag and push the images there and deploy them by digest (default: the images must already be on every node)."), None),
    "node_engine": (_option(Optional[list[str]], "--node-engine", metavar="ENGINE", help="swarm without a registry: copy the images into this node's Docker engine (ssh://USER@NODE, tcp://NODE:2376, unix:///PATH) unless it holds them; repeat for each node."), None),
}

COLLECTION_OPTIONS: dict[str, tuple[Any, Any]] = {
    "input_file": (_option(Optional[Path], "--input", metavar="FILE", help="Rows to collect (NeMo Gym JSONL) instead of the benchmark's datasets."), None),
    "results_dir": (_option(Path, "--results-dir", metavar="DIR", help="Folder that gets one subfolder per run."), Path("results")),
    "run_name": (_option(Optional[str], "--run-name", metavar="NAME", help="Run subfolder name (default: dataset name + time)."), None),
    "resume": (_option(bool, "--resume", help="Continue the latest run of the same name: skip finished rollouts, retry failed ones."), False),
    "limit": (_option(Optional[int], "--limit", metavar="N", help="Collect only the first N rows."), None),
    "num_repeats": (_option(Optional[int], "--num-repeats", metavar="N", help="Rollouts per row (a a b b)."), None),
    "num_samples_in_parallel": (_option(Optional[int], "--num-samples-in-parallel", metavar="N", help="Most rollouts in flight (num_samples_in_parallel)."), None),
    "prompt_config": (_option(Optional[Path], "--prompt-config", metavar="FILE", help="Prompt templates (user/system) applied to every row."), None),
    "temperature": (_option(Optional[float], "--temperature", metavar="T", help="Overrides responses_create_params.temperature."), None),
    "top_p": (_option(Optional[float], "--top-p", metavar="P", help="Overrides responses_create_params.top_p."), None),
    "max_output_tokens": (_option(Optional[int], "--max-output-tokens", metavar="N", help="Overrides responses_create_params.max_output_tokens."), None),
    "skip_missing_images": (_option(bool, "--skip-missing-images", help="SWE benchmarks: leave out the rows whose task image the registry does not have (else the run stops before it starts)."), False),
}


def _inject(target: str, options: dict[str, tuple[Any, Any]], build: Callable[..., Any], needs_context: bool = False):
    """Replace parameter `target` of a command by `options`; on the call, fold them back with `build`."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        kept = [p for p in signature.parameters.values() if p.name != target]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
                 for name, (annotation, default) in options.items()]
        context = []
        if needs_context and not any(p.name == "ctx" for p in kept):
            context = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in options}
            ctx = kwargs.pop("ctx") if context else kwargs.get("ctx")
            kwargs[target] = build(ctx, **values) if needs_context else build(**values)
            return func(*args, **kwargs)

        positional = [p for p in [*context, *kept] if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keyword = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]
        command.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=[*positional, *keyword, *added])
        command.__annotations__ = {
            **{k: v for k, v in getattr(func, "__annotations__", {}).items() if k != target},
            **({"ctx": typer.Context} if context else {}),
            **{name: annotation for name, (annotation, _) in options.items()},
        }
        return command

    return decorate


def _config_request(ctx: typer.Context, *, config, resources_server, model_type, agent_type, benchmark,
                    environment, model, model_url, model_api_key, search_dir) -> ConfigRequest:
    overrides = list(ctx.args)
    stray = [arg for arg in overrides if arg.startswith("-")]
    if stray:
        raise UserError(
            f"unknown option(s): {' '.join(stray)}",
            hint="see `gym-compose COMMAND --help`; overrides look like key=value, +key=value or ++key=value",
        )
    return ConfigRequest(
        config_files=list(config or []),
        resources_servers=list(resources_server or []),
        model_types=list(model_type or []),
        agent_types=list(agent_type or []),
        benchmarks=list(benchmark or []),
        environments=list(environment or []),
        model_name=_policy_model_name(model or []),
        named_models=[value for value in model or [] if is_named_model(value)],
        model_url=model_url,
        model_api_key=model_api_key,
        search_dirs=list(search_dir or []),
        overrides=overrides,
    )


def _policy_model_name(values: list[str]) -> Optional[str]:
    names = [value for value in values if not is_named_model(value)]
    if len(names) > 1:
        raise UserError(f"-m/--model names the policy model twice: {', '.join(names)}",
                        hint="give one NAME (policy_model_name); other models as --model INSTANCE=URL")
    return names[0] if names else None


class StackFlags(NamedTuple):
    """What `@with_stack` gives a command: the plan's options and the target's (StackArgs' order)."""

    options: StackOptions
    target: TargetOptions


def _stack_options(*, project: str, publish: bool, head_port: int, bind: str, advertise_host: str | None,
                   target: str, registry: str | None, node_engine: list[str] | None) -> StackFlags:
    from gym_compose.engine.targets.registry import target_options
    from gym_compose.plan.model import StackOptions

    if not 0 < head_port < 65536:
        raise UserError(f"--head-port must be a TCP port (1-65535), got {head_port}")
    import ipaddress

    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise UserError(f"--bind must be an IP address of this machine, got {bind!r}",
                        hint="e.g. --bind 0.0.0.0 (every interface) or --bind 10.0.0.5") from None
    return StackFlags(StackOptions(project=project, publish_all=publish, head_port=head_port, bind_address=bind,
                                   advertise_host=advertise_host),
                      target_options(target, registry, tuple(node_engine or ())))


def _collection_args(*, input_file, results_dir, run_name, resume, limit, num_repeats, num_samples_in_parallel,
                     prompt_config, temperature, top_p, max_output_tokens, skip_missing_images):
    from gym_compose.runs.run_inputs import CollectionArgs

    passthrough: list[str] = []
    for flag, value in (("--limit", limit), ("--num-samples-in-parallel", num_samples_in_parallel),
                        ("--temperature", temperature), ("--top-p", top_p),
                        ("--max-output-tokens", max_output_tokens)):
        if value is not None:
            passthrough += [flag, str(value)]
    return CollectionArgs(results_dir=results_dir, input_file=input_file, run_name=run_name, resume=resume,
                          collector_args=passthrough, num_repeats=num_repeats, prompt_config=prompt_config,
                          skip_missing_images=skip_missing_images)


with_config = _inject("request", CONFIG_OPTIONS, _config_request, needs_context=True)
with_stack = _inject("stack", STACK_OPTIONS, _stack_options)
with_collection = _inject("collection", COLLECTION_OPTIONS, _collection_args)
