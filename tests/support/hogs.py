"""The lab's memory and IO hogs, run beside the engine in its pod (tests/support/cgroups.py):
real work the kernel makes wait, so the pressure the host check reads is the kernel's own.

    python -m tests.support.hogs memory FILE    # cycles through FILE's pages, mapped
    python -m tests.support.hogs io FILE        # reads FILE with O_DIRECT, 64 KiB at a time

Each waits for a line on stdin before it touches FILE, so that its first page is charged
to the groups it was moved into, not to the test's.

- ``memory``: the file is larger than the hog group's memory limit and no swap is needed:
  its clean pages are evicted and read back on every pass, and the kernel counts those
  refaults of its working set as memory stalls (as for a job whose working set outgrew
  its container's limit).
- ``io``: every read bypasses the page cache and waits on a read rate the group caps, so
  the task sits in IO wait (a backup or a model download on the engine's disk).
"""

from __future__ import annotations

import mmap
import os
import sys

PAGE = mmap.PAGESIZE
IO_BLOCK = 1 << 16


def memory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    # Its pages, written by the test, were charged to the test's group: dropped first, so
    # each comes back charged to the hog's.
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    size = os.fstat(fd).st_size
    pages = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    while True:  # sequentially: readahead keeps it at the disk, not the CPU
        for offset in range(0, size, PAGE):
            pages[offset]


def io(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    size = os.fstat(fd).st_size - os.fstat(fd).st_size % IO_BLOCK
    block = mmap.mmap(-1, IO_BLOCK)  # page-aligned, as O_DIRECT needs
    offset = 0
    while True:
        os.preadv(fd, [block], offset)
        offset = (offset + IO_BLOCK) % size


def main(argv: list[str]) -> None:
    kind, path = argv
    sys.stdin.readline()
    {"memory": memory, "io": io}[kind](path)


if __name__ == "__main__":
    main(sys.argv[1:])
