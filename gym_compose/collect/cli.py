"""`python -m gym_compose.collect`: arguments and NEMO_GYM_CONFIG_DICT in, collect(), exit status out."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from gym_compose.collect.agent_map import agent_map_from
from gym_compose.collect.options import CollectOptions
from gym_compose.contract import CONFIG_DICT_ENV
from gym_compose.errors import UserError

CONFIG_ENV = CONFIG_DICT_ENV


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gym_compose.collect",
                                     description="Collect rollouts: one POST /run per row to its environment server.")
    parser.add_argument("--input", required=True, type=Path, help="input JSONL (NeMo Gym rows)")
    parser.add_argument("--output-dir", required=True, type=Path,
                        help="folder for rollouts*.jsonl, metrics, progress.json")
    parser.add_argument("--limit", type=int, help="use only the first N rows")
    parser.add_argument("--num-repeats", type=int, default=1, help="rollouts per row, in place (a a b b)")
    parser.add_argument("--resume", action="store_true", help="skip finished rollouts, retry failed ones (3 attempts)")
    parser.add_argument("--num-samples-in-parallel", type=int, help="most requests in flight")
    parser.add_argument("--max-resident-rollout-tasks", type=int, help="most rollout tasks admitted at once")
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--top-p", type=float)
    parser.add_argument("--max-output-tokens", type=int)
    parser.add_argument("--prompt-config", type=Path, help="YAML with `user` (and `system`) templates")
    parser.add_argument("--agent", help="send every row to this agent (sets agent_ref)")
    parser.add_argument("--no-retain-results", action="store_true", help="keep no list of results in memory")
    parser.add_argument("--disable-aggregation", action="store_true", help="write no aggregate metrics file")
    parser.add_argument("--request-timeout", type=float, default=3600.0, help="seconds per /run request")
    parser.add_argument("--host-lease", action="store_true",
                        help="stdin is the host's lease: stop when it closes; a line {\"stop\": REASON} stops the run")
    return parser.parse_args(argv)


def load_config_from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    text = (environ if environ is not None else os.environ).get(CONFIG_ENV)
    if not text:
        raise UserError(f"{CONFIG_ENV} is not set",
                        hint="the collector reads the stack's in-network config (YAML) from it")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UserError(f"{CONFIG_ENV} is not valid YAML: {error}") from None
    if not isinstance(config, dict):
        raise UserError(f"{CONFIG_ENV} must be a YAML mapping, got {type(config).__name__}")
    return config


def options_from(args: argparse.Namespace, config: dict[str, Any]) -> CollectOptions:
    """CLI flags win over the config's reserved knobs, which win over the defaults."""
    def flag_or_knob(key: str):
        flag = getattr(args, key, None)
        return flag if flag is not None else config.get(key)

    retain = config.get("retain_results_in_memory")
    return CollectOptions(
        input_path=args.input,
        output_dir=args.output_dir,
        limit=_positive_int("--limit", args.limit),
        num_repeats=_positive_int("--num-repeats", args.num_repeats) or 1,
        resume=args.resume,
        num_samples_in_parallel=_positive_int("num_samples_in_parallel", flag_or_knob("num_samples_in_parallel")),
        max_resident_rollout_tasks=_positive_int("max_resident_rollout_tasks",
                                                 flag_or_knob("max_resident_rollout_tasks")),
        retain_results_in_memory=False if args.no_retain_results else (True if retain is None else bool(retain)),
        disable_aggregation=args.disable_aggregation or bool(config.get("disable_aggregation")),
        temperature=args.temperature,
        top_p=args.top_p,
        max_output_tokens=args.max_output_tokens,
        prompt_config_path=args.prompt_config,
        agent_name=args.agent,
        agent_map=agent_map_from(config, args.agent),
        request_timeout_s=_positive_number("--request-timeout", args.request_timeout),
        host_lease=args.host_lease,
    )


def _positive_int(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_number(name: str, value: float) -> float:
    if not value > 0:
        raise UserError(f"{name} must be a positive number of seconds, got {value!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from gym_compose.collect.collector import collect  # here: the host checks rows with this module, not asyncio

    try:
        config = load_config_from_env()
        result = collect(config, options_from(args, config))
    except UserError as error:
        print(f"collect: error: {error}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"collect: error: {error}; rollouts written so far are kept, rerun with --resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("collect: interrupted; finished rollouts are saved, rerun with --resume", file=sys.stderr)
        return 130
    print(result.summary(), file=sys.stderr)
    return result.exit_code
