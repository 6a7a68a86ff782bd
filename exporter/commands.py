"""The contract between the command-line parser and subcommands that register beside their
code: each such module has ``register(add: AddParser)`` and returns an exit status."""

from __future__ import annotations

import argparse
from collections.abc import Callable

#: A subcommand's function: parsed flags in, exit status out.
Command = Callable[[argparse.Namespace], int]
#: ``add(name, command, help, epilog)`` -> the subcommand's parser, for its flags.
AddParser = Callable[[str, Command, str, str], argparse.ArgumentParser]


def add_config_flag(p: argparse.ArgumentParser, help: str, default: str | None = None) -> None:
    """The config file, spelled as node_exporter spells its flags, on every subcommand;
    ``--config`` stays as the short alias."""
    p.add_argument("--config.file", "--config", dest="config", metavar="FILE", default=default,
                   help=help)
