"""The `gym-compose` command line: parse arguments, call one function, print.

Every command that takes a stack accepts the same config arguments as NeMo Gym's `gym`
(`--config`, the named selectors, `-m/--model`, ...) and treats every other argument as a
Hydra override (`key=value`, `+key=value`, `++key=value`); see gym_compose/cli/shared_options.py.
"""

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gym_compose import interrupts
from gym_compose.cli.shared_options import (
    CONFIG_OPTIONS,
    DEFAULT_PROJECT,
    PROJECT_OPTION,
    STACK_COMMAND,
    exec_arguments,
    with_collection,
    with_config,
    with_stack,
)
from gym_compose.errors import GymComposeError, UserError
from gym_compose.paths import require_project_files

HELP = """Run NeMo Gym-style RL environments and benchmarks as a docker-compose project.

Every server (head, environments, agents, models, resources) runs in its own container.
Arguments that are not options are Hydra overrides: key=value, +key=value, ++key=value.
"""

app = typer.Typer(help=HELP, no_args_is_help=True, add_completion=False, rich_markup_mode=None)
eval_app = typer.Typer(help="Collect rollouts (NeMo Gym's `gym eval`).", no_args_is_help=True)
app.add_typer(eval_app, name="eval")
sandbox_app = typer.Typer(help="Debug a live sandbox of a running stack (`gym-compose ps` lists them); snapshot, "
                               "fork, restore, pause or resume it, or move it to another egress phase.",
                          no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")

DetachOpt = Annotated[bool, typer.Option("--detach", "-d", help="Return once every service is healthy; collect nothing.")]
KeepOpt = Annotated[bool, typer.Option("--keep", help="After collecting, leave the stack running.")]
SearchDirOpt: Any = CONFIG_OPTIONS["search_dir"][0]  # an Annotated[...] built at run time


@app.command(context_settings=STACK_COMMAND)
@with_config
def resolve(request) -> None:
    """Print the merged config as YAML (secrets shown as '****'). Nothing else goes to stdout."""
    from gym_compose.cli.lookup import resolve_command

    resolve_command(request)


@app.command(context_settings=STACK_COMMAND)
@with_config
@with_stack
def render(
    request,
    stack,
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write compose.yaml and its files into.")] = Path("rendered"),
) -> None:
    """Build the images and write a standalone compose project that plain `docker compose` runs."""
    from gym_compose.stack.lifecycle import StackArgs, render_command

    render_command(StackArgs(request, *stack), output)


@app.command(context_settings=STACK_COMMAND)
@with_config
@with_stack
def build(
    request,
    stack,
    pull: Annotated[bool, typer.Option("--pull", help="SWE benchmarks: then pull every task image the rows name that the engine lacks (resumable: run it again to go on).")] = False,
    input_file: Annotated[Optional[Path], typer.Option("--input", metavar="FILE", help="With --pull: the rows whose images to pull (default: the benchmark's datasets).")] = None,
    parallel: Annotated[int, typer.Option("--parallel", min=1, max=32, metavar="N", help="With --pull: images pulled at once.")] = 4,
    save: Annotated[Optional[Path], typer.Option("--save", metavar="DIR", help="With --pull: then save every task image the rows name into DIR, one archive each (resumable), for a machine without the registry.")] = None,
    load: Annotated[Optional[Path], typer.Option("--load", metavar="DIR", help="First load the task image archives of DIR (written by --save) that the engine lacks.")] = None,
) -> None:
    """Build the base image and one image per server implementation (cached by content hash).

    With --pull (for CI runners and machines that should not pull mid-run), it then pulls the task
    images of a SWE benchmark's rows: each image's registry is checked first, missing ones are listed.
    --save DIR then writes them as archives; on a machine that cannot reach the registry, --load DIR
    puts them on its engine (docs/swe.md#air-gapped-machines)."""
    from gym_compose.stack.lifecycle import PullOptions, StackArgs, build_command

    if input_file is not None and not pull:
        raise typer.BadParameter("--input goes with --pull", param_hint="--input")
    if save is not None and not pull:
        raise typer.BadParameter("--save writes what --pull made sure is on the engine; add --pull", param_hint="--save")
    options = PullOptions(input_file, parallel, save, load, pull) if pull or load is not None else None
    build_command(StackArgs(request, *stack), options)


@app.command(context_settings=STACK_COMMAND)
@with_config
@with_stack
@with_collection
def up(request, stack, collection, detach: DetachOpt = False, keep: KeepOpt = False) -> None:
    """Resolve, render, build what is missing, start, and wait until every service is healthy.

    With --benchmark or --input (and no -d) it then collects rollouts in a collector container,
    writes them under --results-dir, prints the key metrics, stops the stack (unless --keep) and
    exits with the collector's status. Otherwise, without -d it stays attached (logs), reports a
    container that dies, and on Ctrl-C stops everything with a grace period.
    """
    from gym_compose.stack.lifecycle import StackArgs, up_command

    args = StackArgs(request, *stack)
    if detach or not (request.benchmarks or collection.input_file):
        up_command(args, detach=detach)
        return
    from gym_compose.runs.eval_run import run_collection

    raise typer.Exit(run_collection(args, collection, serve=True, keep=keep))


@app.command()
def down(
    project: PROJECT_OPTION = DEFAULT_PROJECT,
    all_projects: Annotated[bool, typer.Option("--all", help="Every gym-compose project on this engine (found by label).")] = False,
    match: Annotated[Optional[str], typer.Option(
        "--match", metavar="GLOB", help="With --all: only the projects whose name matches GLOB (e.g. 'ci-*').")] = None,
    images: Annotated[bool, typer.Option(
        "--images", help="Also remove the task images the project's sandbox broker pulled during its runs (an image "
        "a container still uses stays; images that were on the engine before, built ones and `build --pull`'s are "
        "kept).")] = False,
) -> None:
    """Remove the project's containers (sandboxes too), networks and volumes (never the results folder)."""
    from gym_compose.stack.lifecycle import down_all_command, down_command

    if match is not None and not all_projects:
        raise typer.BadParameter("--match selects among the projects of --all; add --all", param_hint="--match")
    if all_projects:
        down_all_command(match, images)
    else:
        down_command(project, images)


@app.command()
def ps(project: PROJECT_OPTION = DEFAULT_PROJECT) -> None:
    """Show the project's services, their health and published addresses, and its live sandboxes."""
    from gym_compose.stack.lifecycle import ps_command

    ps_command(project)


@app.command()
def logs(
    services: Annotated[Optional[list[str]], typer.Argument(help="Services to show (default: all).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following new lines.")] = False,
    tail: Annotated[Optional[str], typer.Option("--tail", help="Lines from the end of each log.")] = None,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Show service logs (passes through to `docker compose logs`)."""
    from gym_compose.stack.log_following import logs_command

    raise typer.Exit(logs_command(project, list(services or []), follow, tail))


SandboxArg = Annotated[str, typer.Argument(
    help="Sandbox: its name, a unique prefix or suffix, or its session id; '-' for the only one.")]


@sandbox_app.command("exec", context_settings={"allow_interspersed_args": False})
def sandbox_exec(
    sandbox: SandboxArg,
    command: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Run a command in a sandbox: gym-compose sandbox exec SANDBOX [-p NAME] -- ls -la."""
    from gym_compose.stack.sandbox_commands import sandbox_exec as run

    project, words = exec_arguments(project, list(command))
    raise typer.Exit(run(project, None if sandbox == "-" else sandbox, words))


@sandbox_app.command("shell")
def sandbox_shell(
    sandbox: Annotated[Optional[str], typer.Argument(help="As for exec; default: the only sandbox.")] = None,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Open an interactive shell (bash, else sh) in a sandbox."""
    from gym_compose.stack.sandbox_commands import sandbox_shell as run

    raise typer.Exit(run(project, None if sandbox in (None, "-") else sandbox))


@sandbox_app.command("snapshot")
def sandbox_snapshot(
    sandbox: SandboxArg,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Commit a leased sandbox's filesystem to a snapshot (not its processes or memory, not /tmp);
    `down` removes it."""
    from gym_compose.stack.sandbox_commands import sandbox_snapshot as run

    raise typer.Exit(run(project, None if sandbox == "-" else sandbox))


@sandbox_app.command("fork")
def sandbox_fork(
    sandbox: Annotated[Optional[str], typer.Argument(
        help="As for exec; left out with --snapshot: fork that snapshot.")] = None,
    count: Annotated[int, typer.Option("-n", "--count", min=1, max=64, help="How many sandboxes to start.")] = 1,
    snapshot: Annotated[Optional[str], typer.Option(
        "--snapshot", help="Fork this snapshot (`gym-compose sandbox snapshots`) instead of a new one.")] = None,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Start N sandboxes from a new snapshot of SANDBOX (or from --snapshot); each changes its own copy."""
    from gym_compose.stack.sandbox_commands import sandbox_fork as run

    if sandbox is None and snapshot is None:
        raise UserError("name a sandbox to fork ('-' for the only one), or a snapshot with --snapshot",
                        hint="e.g. gym-compose sandbox fork SANDBOX -n 4")
    raise typer.Exit(run(project, sandbox, count, snapshot))


@sandbox_app.command("restore")
def sandbox_restore(
    sandbox: SandboxArg,
    snapshot: Annotated[str, typer.Argument(help="The snapshot id (snap-...).")],
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Put a sandbox's files back to a snapshot of its server's; its processes end, its lease stays."""
    from gym_compose.stack.sandbox_commands import sandbox_restore as run

    raise typer.Exit(run(project, None if sandbox == "-" else sandbox, snapshot))


@sandbox_app.command("pause")
def sandbox_pause(
    sandbox: SandboxArg,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Freeze a sandbox's processes (docker pause): memory kept, no CPU, commands refused until resume."""
    from gym_compose.stack.sandbox_commands import sandbox_pause as run

    raise typer.Exit(run(project, None if sandbox == "-" else sandbox))


@sandbox_app.command("resume")
def sandbox_resume(
    sandbox: SandboxArg,
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Thaw a paused sandbox (docker unpause)."""
    from gym_compose.stack.sandbox_commands import sandbox_pause as run

    raise typer.Exit(run(project, None if sandbox == "-" else sandbox, resume=True))


@sandbox_app.command("phase")
def sandbox_phase(
    sandbox: SandboxArg,
    phase: Annotated[str, typer.Argument(help="A phase of its server's network.egress.phases, or 'default' "
                                              "(the hosts of egress.allow).")],
    project: PROJECT_OPTION = DEFAULT_PROJECT,
) -> None:
    """Move an allow-listed sandbox to another egress phase: from now on it reaches that phase's hosts alone."""
    from gym_compose.stack.sandbox_commands import sandbox_phase as run

    raise typer.Exit(run(project, None if sandbox == "-" else sandbox, phase))


@sandbox_app.command("snapshots")
def sandbox_snapshots(project: PROJECT_OPTION = DEFAULT_PROJECT) -> None:
    """List the project's sandbox snapshots."""
    from gym_compose.stack.sandbox_commands import print_snapshots

    raise typer.Exit(print_snapshots(project))


@app.command("list")
def list_components(search_dir: SearchDirOpt = None) -> None:
    """List every resources server, model type, agent type, benchmark and environment the selectors can find."""
    from gym_compose.cli.lookup import list_command

    list_command(list(search_dir or []))


@app.command()
def view(
    run_dirs: Annotated[Optional[list[Path]], typer.Argument(
        metavar="RUN_DIR", show_default=False,
        help="Run folders (what `up`/`eval run` printed after `results:`); several are shown side by side. "
        "Default: the latest run under --results-dir.")] = None,
    export: Annotated[Optional[Path], typer.Option(
        "--export", metavar="FILE.html",
        help="Write one self-contained HTML file (opens with no server and no network) instead of serving.")] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to serve on (default: a free one, printed).")] = 0,
    host: Annotated[str, typer.Option("--host", help="Address to serve on; keep the default unless you mean to share the page.")] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the page in the default web browser.")] = False,
    results_dir: Annotated[Path, typer.Option("--results-dir", help="Where to look for the latest run when no RUN_DIR is given.")] = Path("results"),
    max_tasks: Annotated[int, typer.Option("--max-tasks", min=1, help="--export: tasks per run in the table (failed and lowest-reward first).")] = 2000,
    max_rollouts: Annotated[int, typer.Option("--max-rollouts", min=1, help="--export: rollouts whose trajectories the file holds (failed and lowest-reward first).")] = 300,
) -> None:
    """Look at runs in a web page: metrics, manifest, reward histogram, pass@k, tasks, trajectories.

    Serves the page on 127.0.0.1 at a free port (printed) until Ctrl-C; reload the page to see
    rollouts a running collection added since. With --export, writes one HTML file instead.
    """
    from gym_compose.view import export_report, serve
    from gym_compose.view.run_folder import resolve_run_folders

    folders = resolve_run_folders(list(run_dirs or []), results_dir)
    if export is not None:
        export_report(folders, export, max_tasks=max_tasks, max_rollouts=max_rollouts)
        return
    serve(folders, host=host, port=port, open_browser=open_browser)


@eval_app.command("run", context_settings=STACK_COMMAND)
@with_config
@with_stack
@with_collection
def eval_run(
    request,
    stack,
    collection,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Collect against the stack that is already up.")] = False,
    keep: KeepOpt = False,
) -> None:
    """Collect rollouts: serve, collect and stop; or with --no-serve, against the stack that is up.

    Pass the same config arguments as the `up` that started the stack. Exits 0 when every
    rollout succeeded, 1 when some failed (see rollouts_failures.jsonl), 2 on bad input.
    """
    from gym_compose.runs.eval_run import run_collection
    from gym_compose.stack.lifecycle import StackArgs

    raise typer.Exit(run_collection(StackArgs(request, *stack), collection, serve=not no_serve, keep=keep))


@eval_app.command("rerun", context_settings=STACK_COMMAND)
@with_stack
def eval_rerun(
    ctx: typer.Context,
    stack,
    run_dir: Annotated[Path, typer.Argument(help="A finished run folder (it holds manifest.json and input.jsonl).")],
    model_api_key: Annotated[Optional[str], typer.Option(
        "--model-api-key", metavar="KEY", help="The model key again (the manifest masks it); also from env.yaml.")] = None,
    results_dir: Annotated[Optional[Path], typer.Option(
        "--results-dir", help="Parent of the new run folder (default: the run's own parent).")] = None,
    run_name: Annotated[Optional[str], typer.Option(
        "--run-name", help="New run folder prefix (default: the run's name + '-rerun').")] = None,
    rebuild: Annotated[bool, typer.Option(
        "--rebuild", help="Build images of the run that are gone again, from the same recipe (same content hash).")] = False,
    keep: KeepOpt = False,
) -> None:
    """Run a finished run again from its manifest alone, into a new run folder.

    The same resolved config (secrets masked in the manifest are asked for again: --model-api-key,
    env.yaml, or ++PATH=VALUE), the same images by id, the same rows (input.jsonl) and collector
    options. Other overrides change the config, as in any command. Docker settings of the manifest
    that a fresh `up` would not give (host mounts, added capabilities, root, a writable root) are
    left out unless given again here (the rerun names each). Then compare the two runs with
    `gym-compose eval compare`.
    """
    from gym_compose.runs.rerun import rerun_command

    stray = [arg for arg in ctx.args if arg.startswith("-")]
    if stray:
        raise UserError(f"unknown option(s): {' '.join(stray)}", hint="see `gym-compose eval rerun --help`")
    raise typer.Exit(rerun_command(run_dir, stack, list(ctx.args), model_api_key, results_dir, run_name, keep, rebuild))


@eval_app.command("compare")
def eval_compare(
    run_a: Annotated[Path, typer.Argument(help="The first run folder (A).")],
    run_b: Annotated[Path, typer.Argument(help="The second run folder (B).")],
    json_output: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
    max_tasks: Annotated[int, typer.Option("--max-tasks", min=1, help="Flipped tasks to list.")] = 50,
    fail_below: Annotated[Optional[list[str]], typer.Option(
        "--fail-below", metavar="METRIC[=TOLERANCE]",
        help="Exit 1 when B's METRIC (e.g. mean/reward) is more than TOLERANCE (default 0) below A's, for any "
             "agent: A is the baseline (CI). Repeatable.")] = None,
) -> None:
    """Compare two runs: each agent's key metrics side by side with deltas, and the tasks that
    flipped between passing and failing (a task passes when its mean reward is at least 0.5)."""
    from gym_compose.runs.compare import compare_command

    compare_command(run_a, run_b, json_output=json_output, max_tasks=max_tasks, fail_below=fail_below)


@eval_app.command("prepare", context_settings=STACK_COMMAND)
@with_config
def eval_prepare(request) -> None:
    """Run the `prepare_script` of every benchmark dataset to produce its JSONL (on the host)."""
    from gym_compose.runs.datasets import prepare_datasets

    prepare_datasets(request)


INTERRUPTED_BY: dict[str, int] = {"signal": signal.SIGINT}
INTERRUPTED = 130  # what typer (or click) makes of a KeyboardInterrupt


def _terminate(signum, frame) -> None:
    """SIGTERM (a CI job cancelled, `kill`) and SIGHUP (the terminal closed) clean up exactly like
    Ctrl-C; the exit status then says which signal it was (128 + its number)."""
    if signum == signal.SIGHUP:  # the terminal is gone: what we would print now cannot reach anyone
        devnull = open(os.devnull, "w")
        sys.stdout, sys.stderr = devnull, devnull
    INTERRUPTED_BY["signal"] = signum
    interrupts.interrupt()  # a KeyboardInterrupt now, or once a wait on a process is safe to leave


def _usage_error_types() -> tuple[type[Exception], ...]:
    """Click's ClickException: the base of typer.BadParameter, whether typer depends on click
    (older releases) or carries its own copy of it (typer._click, since 0.2x)."""
    return tuple(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "ClickException")


def install_signal_handlers() -> None:
    """Ctrl-C, SIGTERM and SIGHUP clean up (`_terminate`); SIGUSR1 prints where every thread of a
    command that seems stuck is (docs/troubleshooting.md), to the stderr it started with, and goes on."""
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    faulthandler.register(signal.SIGUSR1, file=2, all_threads=True)  # fd 2: stays when SIGHUP swaps sys.stderr


def main() -> None:
    install_signal_handlers()
    try:
        require_project_files()
        code = app(standalone_mode=False, prog_name="gym-compose")
    except GymComposeError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except OSError as error:  # a file we could not read or write: say which, no traceback
        print(f"error: {error.strerror or error}" + (f": {error.filename}" if error.filename else ""), file=sys.stderr)
        sys.exit(1)
    except (typer.Abort, KeyboardInterrupt):  # click turns a KeyboardInterrupt into Abort
        code = INTERRUPTED
    except _usage_error_types() as error:  # a usage error: one line, with typer's usage hint; exit 2
        usage_error: Any = error  # click's ClickException, from whichever click typer carries
        usage_error.show()
        sys.exit(usage_error.exit_code)
    if code == INTERRUPTED:  # typer 0.2x makes a KeyboardInterrupt exit 130: say which signal it was
        code = 128 + INTERRUPTED_BY["signal"]
    sys.exit(code if isinstance(code, int) else 0)
