"""`preemptctl config`: the effective settings, secrets masked, as the worker would run."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

from preemptctl.worker.config import ConfigError, load_settings
from preemptctl.worker.errors import UsageError, add_output_flag


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="print the effective settings (defaults, file, PREEMPT_* variables), secrets masked",
        description="Print the settings the worker would run with: defaults, then Temporal's "
        "environment configuration (TEMPORAL_ADDRESS, profiles), then the settings file, then "
        "PREEMPT_* variables. Secrets are masked.",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML); or $PREEMPT_CONFIG")
    add_output_flag(parser, ("yaml", "json"), default="yaml")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    if args.output == "json":
        print(json.dumps(settings.masked(), indent=2))
    else:
        print(yaml.safe_dump(settings.masked(), sort_keys=False).rstrip())
    return 0
