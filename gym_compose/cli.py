"""The `gym-compose` command line: parse arguments, call one function, print.

Every command that takes a stack accepts the same config arguments as NeMo Gym's `gym`
(`--config`, the named selectors, `-m/--model`, ...) and treats every other argument as a
Hydra override (`key=value`, `+key=value`, `++key=value`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gym_compose.config.request import ConfigRequest
from gym_compose.errors import UserError

HELP = """Run NeMo Gym-style RL environments and benchmarks as a docker-compose project.

Every server (head, environments, agents, models, resources) runs in its own container.
Arguments that are not options are Hydra overrides: key=value, +key=value, ++key=value.
"""

app = typer.Typer(help=HELP, no_args_is_help=True, add_completion=False, rich_markup_mode=None)
eval_app = typer.Typer(help="Collect rollouts (NeMo Gym's `gym eval`).", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

STACK_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True}

ConfigOpt = Annotated[
    Optional[list[Path]],
    typer.Option("--config", help="A config file; repeatable. Loads before selector files."),
]
ResourcesServerOpt = Annotated[
    Optional[list[str]],
    typer.Option("--resources-server", help="Resources server NAME or NAME/FLAVOR; repeatable."),
]
ModelTypeOpt = Annotated[
    Optional[list[str]],
    typer.Option("--model-type", help="Model server type NAME or NAME/FLAVOR (default: mock_model)."),
]
AgentTypeOpt = Annotated[
    Optional[list[str]], typer.Option("--agent-type", help="Agent server type NAME or NAME/FLAVOR.")
]
BenchmarkOpt = Annotated[
    Optional[list[str]], typer.Option("--benchmark", help="Benchmark NAME or NAME/FLAVOR; repeatable.")
]
EnvironmentOpt = Annotated[
    Optional[list[str]], typer.Option("--environment", help="Environment NAME or NAME/FLAVOR.")
]
ModelOpt = Annotated[
    Optional[str], typer.Option("--model", "-m", help="Sets policy_model_name.")
]
ModelUrlOpt = Annotated[Optional[str], typer.Option("--model-url", help="Sets policy_base_url.")]
ModelKeyOpt = Annotated[
    Optional[str], typer.Option("--model-api-key", help="Sets policy_api_key (kept secret).")
]
ProjectOpt = Annotated[
    str,
    typer.Option("--project", "-p", envvar="GYM_COMPOSE_PROJECT", help="Compose project name."),
]
PublishOpt = Annotated[
    bool, typer.Option("--publish", help="Also publish every server on 127.0.0.1 (head: 11000, others: 11001...).")
]
HeadPortOpt = Annotated[int, typer.Option("--head-port", help="Host port the head is published on (127.0.0.1).")]
InputOpt = Annotated[
    Optional[Path], typer.Option("--input", help="Rows to collect (NeMo Gym JSONL) instead of the benchmark's datasets.")
]
ResultsDirOpt = Annotated[Path, typer.Option("--results-dir", help="Folder that gets one subfolder per run.")]
RunNameOpt = Annotated[
    Optional[str], typer.Option("--run-name", help="Run subfolder name (default: dataset name + time).")
]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue the latest run of the same name: skip finished rollouts, retry failed ones.")
]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", help="Collect only the first N rows.")]
NumRepeatsOpt = Annotated[Optional[int], typer.Option("--num-repeats", help="Rollouts per row (a a b b).")]
ParallelOpt = Annotated[
    Optional[int], typer.Option("--num-samples-in-parallel", help="Most rollouts in flight (num_samples_in_parallel).")
]
PromptConfigOpt = Annotated[
    Optional[Path], typer.Option("--prompt-config", help="Prompt templates (user/system) applied to every row.")
]
TemperatureOpt = Annotated[Optional[float], typer.Option("--temperature", help="Overrides responses_create_params.temperature.")]
TopPOpt = Annotated[Optional[float], typer.Option("--top-p", help="Overrides responses_create_params.top_p.")]
MaxTokensOpt = Annotated[
    Optional[int], typer.Option("--max-output-tokens", help="Overrides responses_create_params.max_output_tokens.")
]
SearchDirOpt = Annotated[
    Optional[list[Path]],
    typer.Option(
        "--search-dir",
        help="Extra root where selectors resolve with NeMo Gym's relative paths (e.g. a NeMo "
        "Gym checkout); repeatable. Also read from GYM_COMPOSE_SEARCH_PATH (':'-separated).",
    ),
]


def _config_request(
    ctx: typer.Context,
    config: Optional[list[Path]],
    resources_server: Optional[list[str]],
    model_type: Optional[list[str]],
    agent_type: Optional[list[str]],
    benchmark: Optional[list[str]],
    environment: Optional[list[str]],
    model: Optional[str],
    model_url: Optional[str],
    model_api_key: Optional[str],
    search_dir: Optional[list[Path]],
) -> ConfigRequest:
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
        model_name=model,
        model_url=model_url,
        model_api_key=model_api_key,
        search_dirs=list(search_dir or []),
        overrides=overrides,
    )


def _stack_options(project: str, publish: bool, head_port: int):
    from gym_compose.plan import StackOptions

    return StackOptions(project=project, publish_all=publish, head_port=head_port)


@app.command(context_settings=STACK_COMMAND)
def resolve(
    ctx: typer.Context,
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Print the merged config as YAML (secrets shown as '****'). Nothing else goes to stdout."""
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.commands import resolve_command

    resolve_command(request)


@app.command(context_settings=STACK_COMMAND)
def render(
    ctx: typer.Context,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write compose.yaml and its files into.")] = Path("rendered"),
    publish: PublishOpt = False,
    project: ProjectOpt = "gym-compose",
    head_port: HeadPortOpt = 11000,
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Build the images and write a standalone compose project that plain `docker compose` runs."""
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.stack_commands import StackArgs, render_command

    render_command(StackArgs(request, _stack_options(project, publish, head_port)), output)


@app.command(context_settings=STACK_COMMAND)
def build(
    ctx: typer.Context,
    project: ProjectOpt = "gym-compose",
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Build the base image and one image per server implementation (cached by content hash)."""
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.stack_commands import StackArgs, build_command

    build_command(StackArgs(request, _stack_options(project, False, 11000)))


@app.command(context_settings=STACK_COMMAND)
def up(
    ctx: typer.Context,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Return once every service is healthy; collect nothing.")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="After collecting, leave the stack running.")] = False,
    publish: PublishOpt = False,
    project: ProjectOpt = "gym-compose",
    head_port: HeadPortOpt = 11000,
    input_file: InputOpt = None,
    results_dir: ResultsDirOpt = Path("results"),
    run_name: RunNameOpt = None,
    resume: ResumeOpt = False,
    limit: LimitOpt = None,
    num_repeats: NumRepeatsOpt = None,
    num_samples_in_parallel: ParallelOpt = None,
    prompt_config: PromptConfigOpt = None,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_output_tokens: MaxTokensOpt = None,
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Resolve, render, build what is missing, start, and wait until every service is healthy.

    With --benchmark or --input (and no -d) it then collects rollouts in a collector container,
    writes them under --results-dir, prints the key metrics, stops the stack (unless --keep) and
    exits with the collector's status. Otherwise, without -d it stays attached (logs), reports a
    container that dies, and on Ctrl-C stops everything with a grace period.
    """
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.stack_commands import StackArgs, up_command

    args = StackArgs(request, _stack_options(project, publish, head_port))
    if detach or not (benchmark or input_file):
        up_command(args, detach=detach)
        return
    from gym_compose.evaluation import run_collection

    collection = _collection_args(input_file, results_dir, run_name, resume, limit, num_repeats,
                                  num_samples_in_parallel, prompt_config, temperature, top_p, max_output_tokens)
    raise typer.Exit(run_collection(args, collection, serve=True, keep=keep))


@app.command()
def down(project: ProjectOpt = "gym-compose") -> None:
    """Remove the project's containers, networks and volumes (never the results folder)."""
    from gym_compose.stack_commands import down_command

    down_command(project)


@app.command()
def ps(project: ProjectOpt = "gym-compose") -> None:
    """Show the project's services, their health and published addresses."""
    from gym_compose.stack_commands import ps_command

    ps_command(project)


@app.command()
def logs(
    services: Annotated[Optional[list[str]], typer.Argument(help="Services to show (default: all).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following new lines.")] = False,
    tail: Annotated[Optional[str], typer.Option("--tail", help="Lines from the end of each log.")] = None,
    project: ProjectOpt = "gym-compose",
) -> None:
    """Show service logs (passes through to `docker compose logs`)."""
    from gym_compose.stack_commands import logs_command

    raise typer.Exit(logs_command(project, list(services or []), follow, tail))


@app.command("list")
def list_components(
    search_dir: SearchDirOpt = None,
) -> None:
    """List every resources server, model type, agent type, benchmark and environment the selectors can find."""
    from gym_compose.commands import list_command

    list_command(list(search_dir or []))


@eval_app.command("run", context_settings=STACK_COMMAND)
def eval_run(
    ctx: typer.Context,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Collect against the stack that is already up.")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Leave the stack running afterwards.")] = False,
    publish: PublishOpt = False,
    project: ProjectOpt = "gym-compose",
    head_port: HeadPortOpt = 11000,
    input_file: InputOpt = None,
    results_dir: ResultsDirOpt = Path("results"),
    run_name: RunNameOpt = None,
    resume: ResumeOpt = False,
    limit: LimitOpt = None,
    num_repeats: NumRepeatsOpt = None,
    num_samples_in_parallel: ParallelOpt = None,
    prompt_config: PromptConfigOpt = None,
    temperature: TemperatureOpt = None,
    top_p: TopPOpt = None,
    max_output_tokens: MaxTokensOpt = None,
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Collect rollouts: serve, collect and stop; or with --no-serve, against the stack that is up.

    Pass the same config arguments as the `up` that started the stack. Exits 0 when every
    rollout succeeded, 1 when some failed (see rollouts_failures.jsonl), 2 on bad input.
    """
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.evaluation import run_collection
    from gym_compose.stack_commands import StackArgs

    args = StackArgs(request, _stack_options(project, publish, head_port))
    collection = _collection_args(input_file, results_dir, run_name, resume, limit, num_repeats,
                                  num_samples_in_parallel, prompt_config, temperature, top_p, max_output_tokens)
    raise typer.Exit(run_collection(args, collection, serve=not no_serve, keep=keep))


def _collection_args(input_file, results_dir, run_name, resume, limit, num_repeats, num_samples_in_parallel,
                     prompt_config, temperature, top_p, max_output_tokens):
    from gym_compose.evaluation import CollectionArgs

    passthrough: list[str] = []
    for flag, value in (("--limit", limit), ("--num-samples-in-parallel", num_samples_in_parallel),
                        ("--temperature", temperature), ("--top-p", top_p),
                        ("--max-output-tokens", max_output_tokens)):
        if value is not None:
            passthrough += [flag, str(value)]
    return CollectionArgs(results_dir=results_dir, input_file=input_file, run_name=run_name, resume=resume,
                          collector_args=passthrough, num_repeats=num_repeats, prompt_config=prompt_config)


@eval_app.command("prepare", context_settings=STACK_COMMAND)
def eval_prepare(
    ctx: typer.Context,
    config: ConfigOpt = None,
    resources_server: ResourcesServerOpt = None,
    model_type: ModelTypeOpt = None,
    agent_type: AgentTypeOpt = None,
    benchmark: BenchmarkOpt = None,
    environment: EnvironmentOpt = None,
    model: ModelOpt = None,
    model_url: ModelUrlOpt = None,
    model_api_key: ModelKeyOpt = None,
    search_dir: SearchDirOpt = None,
) -> None:
    """Run the `prepare_script` of every benchmark dataset to produce its JSONL (on the host)."""
    request = _config_request(ctx, config, resources_server, model_type, agent_type, benchmark,
                              environment, model, model_url, model_api_key, search_dir)
    from gym_compose.inputs import prepare_datasets

    prepare_datasets(request)


def main() -> None:
    try:
        code = app(standalone_mode=False)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as error:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        raise
    sys.exit(code if isinstance(code, int) else 0)
