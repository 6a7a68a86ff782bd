"""Read a config file: YAML with line numbers -> merged ``paths`` files -> ``Config``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from exporter.config.files import FileProblem, read_text
from exporter.config.models import Config, PathsInclude
from exporter.config.values import CONFIG_DIR, RESOLVE_SECRETS
from exporter.config.yamlfile import ConfigError, YamlPath, compose_named, validate


def load_config(path: str | os.PathLike[str], resolve_secrets: bool = True) -> Config:
    """Read and validate ``path``; raise ConfigError with one line per problem."""
    name = str(path)
    try:
        text = read_text(path)
    except FileProblem as exc:
        raise ConfigError([f"{name}: cannot read config: {exc}"]) from None
    return parse_config(text, name, resolve_secrets)


def parse_config(text: str, name: str = "config", resolve_secrets: bool = True) -> Config:
    data, lines = compose_named(text, name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{name} (line 1): expected a mapping of sections at the top level"])
    _paths_files(data, lines, name)
    config = validate(Config, data, lines, name,
                      {RESOLVE_SECRETS: resolve_secrets, CONFIG_DIR: str(Path(name).parent)})
    config.locate(name, lines)
    return config


def _paths_files(data: dict[str, Any], lines: dict[YamlPath, int], name: str) -> None:
    """Resolve the file keys of ``paths`` against the config's folder; merge ``include``.

    Problems inside the included file name that file and its line, then where it was
    included; a target name it shares with the config's own carrier is refused.
    """
    paths = data.get("paths")
    if not isinstance(paths, dict):
        return
    for key in ("include", "route_table"):
        if isinstance(paths.get(key), str):
            paths[key] = str(Path(name).parent / paths[key])
    include = paths.get("include")
    if not isinstance(include, str):
        return  # absent, or a wrong type the model reports
    origin = f"included by {name} line {lines.get(('paths', 'include'))}"
    try:
        text = read_text(include)
    except FileProblem as exc:
        line = lines.get(("paths", "include"))
        raise ConfigError(
            [f"{name}: paths.include (line {line}): cannot read {include}: {exc}"]
        ) from None
    try:
        inc_data, inc_lines = compose_named(text, include)
        extra = validate(PathsInclude, inc_data or {}, inc_lines, include)
    except ConfigError as exc:
        raise ConfigError([f"{m} ({origin})" for m in exc.messages]) from None
    carriers = paths.setdefault("carriers", {})
    if not isinstance(carriers, dict):
        return
    for carrier, targets in extra.carriers.items():
        own = carriers.setdefault(carrier, [])
        if not isinstance(own, list):
            return
        names = {t.get("name") for t in own if isinstance(t, dict)}
        for i, target in enumerate(targets):
            if target.name in names:
                raise ConfigError(
                    [
                        f"{include}: carriers.{carrier}[{i}] (line"
                        f" {inc_lines.get(('carriers', carrier, i))}): target name"
                        f" {target.name!r} is also in paths.carriers.{carrier} ({origin})"
                    ]
                )
            own.append(target.model_dump(exclude_none=True))


