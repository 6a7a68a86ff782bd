"""Hostile or mistaken config files, shared by tests/test_hostile_config.py and
benchmarks/hostile_config.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def billion_laughs() -> str:
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, 9):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        text += f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
    return text


#: name -> (how to write the file (its result unused), the one line the CLI must print)
HOSTILE: dict[str, tuple[Callable[[Path], object], str]] = {
    "bomb": (lambda p: p.write_text(billion_laughs()), r"expands to more than \d+ values"),
    "deep": (lambda p: p.write_text("a: " + "[" * 50000 + "]" * 50000 + "\n"),
             r"\(line 1\): nested deeper than \d+ levels"),
    "nul": (lambda p: p.write_bytes(b"server:\n  log_format: logfmt\x00\n"),
            r"line 2 contains a NUL byte"),
    "utf8": (lambda p: p.write_bytes(b"server:\n  log_format: \xff\xfe\n"),
             r"line 2 is not valid UTF-8"),
    "fifo": (lambda p: os.mkfifo(p), r"not a regular file"),
    "dev-zero-secret": (
        lambda p: p.write_text("engines:\n  - {name: e, url: 'http://127.0.0.1:1/metrics',"
                               " bearer_token: {file: /dev/zero}}\n"),
        r"bearer_token \(line 2\): cannot read secret file /dev/zero: not a regular file"),
    "10mb": (lambda p: p.write_text("engines:\n" + "".join(
        f"  - {{name: e{i}, url: 'http://127.0.0.1:1/metrics', bogus: 1}}\n"
        for i in range(150_000))), r"larger than 1024 KiB"),
    "empty": (lambda p: p.write_text(""), r"configures no checks"),
}
