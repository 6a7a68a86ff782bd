"""Reading the files a config names, with limits, so a hostile or mistaken path (a FIFO,
/dev/zero, a 10 MB file, binary data) is one clear error instead of a hang, a MemoryError
or a traceback."""

from __future__ import annotations

import os
import stat

#: The config file and the files it includes; real configs are a few KiB.
MAX_CONFIG_BYTES = 1024 * 1024
#: A secret is a token or a key; anything bigger is the wrong file.
MAX_SECRET_BYTES = 64 * 1024


class FileProblem(ValueError):
    """Why a file cannot be used, phrased for the user (without the file's name)."""


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileProblem(exc.strerror or str(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileProblem("not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise FileProblem(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileProblem(f"larger than {limit // 1024} KiB")
    return data


def read_text(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES) -> str:
    """UTF-8 text of a bounded regular file; a NUL byte or invalid UTF-8 names its line
    (a NUL would otherwise reach the YAML scanner as an unreadable character)."""
    data = read_bounded(path, limit)
    nul = data.find(b"\0")
    if nul >= 0:
        raise FileProblem(f"line {_line_at(data, nul)} contains a NUL byte")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileProblem(f"line {_line_at(data, exc.start)} is not valid UTF-8") from None


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
