"""YAML with line numbers: every config problem names its YAML path and line.

``compose`` parses text into plain data plus a map from each path to its line; ``validate``
runs a pydantic model over that data and turns each error into ``name: path (line N): msg``
so a user can fix the file without reading a traceback. The config loader and the route
table loader of the path checks both read their files through here.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Union

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

YamlPath = tuple[str | int, ...]


class ConfigError(Exception):
    """A config problem, already formatted for the user (one line per problem)."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


# --- YAML with line numbers -------------------------------------------------------------


#: Limits far above any real config, far below what hurts: PyYAML composes recursively
#: (50k-deep nesting is a RecursionError) and aliases expand each time they are walked
#: (a billion-laughs file is 10^9 values from 1 KiB).
MAX_DEPTH = 64
MAX_ALIASES = 100
MAX_VALUES = 100_000
#: A file with thousands of mistakes gets the first ones and a count, not a flood.
MAX_MESSAGES = 20
#: libyaml's parser where PyYAML was built with it (its wheels are): the same events, nodes
#: and marks, several times faster than the pure-Python one on a large target list.
Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_shape(text: str) -> None:
    """Depth and alias count from the event stream, which PyYAML reads without recursion."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=Loader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ConfigError([f"(line {line}): nested deeper than {MAX_DEPTH} levels"])
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise ConfigError([f"(line {line}): more than {MAX_ALIASES} aliases"])


def compose(text: str) -> tuple[Any, dict[YamlPath, int]]:
    """Parse YAML into plain data plus a map from each path to its 1-based line."""
    loader = Loader(text)
    try:
        _check_shape(text)
        node = loader.get_single_node()
        lines: dict[YamlPath, int] = {}
        walked = 0

        def walk(n: yaml.Node, path: YamlPath) -> Any:
            nonlocal walked
            walked += 1
            if walked > MAX_VALUES:
                raise ConfigError(
                    [f"(line {n.start_mark.line + 1}): expands to more than {MAX_VALUES}"
                     " values (aliases of aliases?)"]
                )
            lines.setdefault(path, n.start_mark.line + 1)
            if isinstance(n, yaml.MappingNode):
                loader.flatten_mapping(n)  # resolves '<<' merge keys
                out: dict[Any, Any] = {}
                for key_node, value_node in n.value:
                    key = loader.construct_object(key_node, deep=True)
                    if not isinstance(key, str | int) or isinstance(key, bool):
                        key = str(key)
                    child = (*path, key)
                    lines[child] = key_node.start_mark.line + 1
                    if key in out:
                        raise ConfigError(
                            [f"{format_path(child)} (line {lines[child]}): duplicate key"]
                        )
                    out[key] = walk(value_node, child)
                return out
            if isinstance(n, yaml.SequenceNode):
                return [walk(item, (*path, i)) for i, item in enumerate(n.value)]
            return loader.construct_object(n, deep=True)

        data = walk(node, ()) if node is not None else {}
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        problem = exc.problem or exc.context or "invalid YAML"
        if "maximum nesting depth" in problem and mark:
            # libyaml's own limit (1,000 levels), which its scanner's look-ahead reaches
            # before our event check: the same problem, said the same way.
            raise ConfigError([f"(line {mark.line + 1}): nested deeper than {MAX_DEPTH} levels"]
                              ) from None
        raise ConfigError([f"({where}): invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"invalid YAML: {exc}"]) from None
    finally:
        loader.dispose()
    return data, lines


def format_path(path: YamlPath) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def line_of(path: YamlPath, lines: dict[YamlPath, int]) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def unwrap(annotation: Any) -> Iterator[Any]:
    """The concrete types behind Optional/Annotated/Union annotations."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        yield from unwrap(typing.get_args(annotation)[0])
    elif origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from unwrap(arg)
    else:
        yield annotation


def _model_at(root: type[BaseModel], path: YamlPath) -> type[BaseModel] | None:
    """The model class that owns the mapping at ``path`` (for did-you-mean hints)."""
    candidates: list[Any] = [root]
    for part in path:
        nxt: list[Any] = []
        for cand in candidates:
            for t in unwrap(cand):
                if isinstance(t, type) and issubclass(t, BaseModel) and isinstance(part, str):
                    if part in t.model_fields:
                        nxt.append(t.model_fields[part].annotation)
                elif typing.get_origin(t) is list and isinstance(part, int):
                    nxt.append(typing.get_args(t)[0])
                elif typing.get_origin(t) is dict:
                    nxt.append(typing.get_args(t)[1])
        candidates = nxt
    for cand in candidates:
        for t in unwrap(cand):
            if isinstance(t, type) and issubclass(t, BaseModel):
                return t
    return None


def _describe(root: type[BaseModel], err: Mapping[str, Any], path: YamlPath) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(path[-1])
        model = _model_at(root, path[:-1])
        hint = ""
        if model is not None:
            close = difflib.get_close_matches(key, list(model.model_fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(model.model_fields)
            return f"unknown key {key!r}{hint}; known keys: {known}"
        return f"unknown key {key!r}"
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    builtin = not kind.startswith(
        (
            "duration",
            "name",
            "url",
            "time",
            "timezone",
            "inline_secret",
            "secret",
            "listen",
            "window",
            "port",
            "duplicate",
            "burst",
            "route_table",
            "web",
        )
    )
    value = err.get("input")
    if builtin and isinstance(value, str | int | float | bool) and "got" not in msg:
        msg = f"{msg}, got {value!r}"
    return msg[0].lower() + msg[1:] if msg else msg


def compose_named(text: str, name: str) -> tuple[Any, dict[YamlPath, int]]:
    try:
        return compose(text)
    except ConfigError as exc:
        sep = {True: " ", False: ": "}
        raise ConfigError([f"{name}{sep[m.startswith('(')]}{m}" for m in exc.messages]) from None


_M = typing.TypeVar("_M", bound=BaseModel)


def validate(
    model: type[_M], data: Any, lines: dict[YamlPath, int], name: str,
    context: dict[str, Any] | None = None,
) -> _M:
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        messages = []
        for err in exc.errors():
            loc: YamlPath = tuple(p for p in err["loc"] if isinstance(p, str | int))
            # pydantic adds "function-after[...]"-style wrapper names to some locations.
            loc = tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
            line = line_of(loc, lines)
            where = f" (line {line})" if line else ""
            messages.append(f"{name}: {format_path(loc)}{where}: {_describe(model, err, loc)}")
        if len(messages) > MAX_MESSAGES:
            more = len(messages) - MAX_MESSAGES
            messages = [*messages[:MAX_MESSAGES], f"{name}: ... and {more} more problems"]
        raise ConfigError(messages) from None
