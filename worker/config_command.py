"""`preemptctl config`: the effective settings, secrets masked, as the worker would run."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from preemptctl.worker.config import ConfigError, load_settings
from preemptctl.worker.errors import UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "config",
        help="print the effective settings (defaults, file, PREEMPT_* variables), secrets masked",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (YAML); or $PREEMPT_CONFIG")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    print(yaml.safe_dump(settings.masked(), sort_keys=False).rstrip())
    return 0
