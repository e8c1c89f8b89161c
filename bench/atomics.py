#!/usr/bin/env python3
"""The atomic read-modify-write instructions a process executed, from a
callgrind profile.

    bench/atomics.py PROFILE [TOP]

PROFILE is a callgrind output file written with `--dump-instr=yes`. Prints
the number of atomic read-modify-writes executed (x86-64: an instruction
with a `lock` prefix, or `xchg` with a memory operand, which is locked
without one), then the TOP functions (default 0) that executed the most.

Why: callgrind counts each as one instruction, but on the machines these
figures were taken on one costs ~4.5 ns alone (`lock xadd` in a loop) and
~6 ns more than a plain add amid other loads and stores: it waits for every
earlier store to reach the cache. A reference count, a mutex's lock and
unlock, a shared counter, a task's state change: each is one or two.
"""

import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import callgrind_instructions  # noqa: E402

LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(?:lock\s|xchg\s+\S*\()")


def locked_addresses(obj):
    """The addresses of the atomic read-modify-writes in object file `obj`."""
    try:
        out = subprocess.run(
            ["objdump", "-d", "--no-show-raw-insn", obj],
            capture_output=True, text=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {int(m.group(1), 16) for m in map(LOCKED.match, out.splitlines()) if m}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    executed, function_of = callgrind_instructions(sys.argv[1])
    locked = {}
    per_fn = collections.Counter()
    total = 0
    for (ob, addr), n in executed.items():
        if ob not in locked:
            locked[ob] = locked_addresses(ob) if ob else set()
        if addr in locked[ob]:
            total += n
            per_fn[function_of[(ob, addr)]] += n
    print(total)
    for fn, n in per_fn.most_common(top):
        name = re.sub(r"<[^<>]*>", "", fn or "?")[:100]
        print(f"{n:10d}  {name}")


if __name__ == "__main__":
    main()
