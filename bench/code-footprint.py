#!/usr/bin/env python3
"""The code a process executes on every request, from a callgrind profile.

    bench/code-footprint.py PROFILE REQUESTS [TOP]

PROFILE is a callgrind output file written with `--dump-instr=yes`, of a
run that answered REQUESTS requests. A 64-byte line of machine code is
"hot" when one of its instructions ran at least 0.45 times a request: with
two worker threads each running a copy of its own of a generic function,
each copy runs for about half the requests. Prints
the hot lines, in KiB and in 4 KiB pages, then the TOP functions (default 0)
holding the most hot lines, with their instructions a request.

Why: when the hot code is larger than the 32 KiB L1 instruction cache, each
request fetches most of it again from L2, and the instruction count alone
no longer says how long a request takes.
"""

import collections
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import callgrind_instructions  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, requests = sys.argv[1], int(sys.argv[2])
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if requests <= 0:
        sys.exit("code-footprint.py: REQUESTS must be a positive count")
    executed, function_of = callgrind_instructions(path)
    # Each instruction counts once per execution: a line's busiest
    # instruction says how often the line was fetched.
    line_runs = {}
    line_fn = {}
    for (ob, a), n in executed.items():
        line = (ob, a // 64)
        if n > line_runs.get(line, 0):
            line_runs[line] = n
            line_fn[line] = function_of[(ob, a)]
    hot = [line for line, n in line_runs.items() if n >= 0.45 * requests]
    pages = {(ob, line * 64 // 4096) for ob, line in hot}
    print(f"hot code: {len(hot)} lines, {len(hot) * 64 / 1024:.1f} KiB, in {len(pages)} pages of 4 KiB")
    if top:
        per_fn = collections.Counter(line_fn[line] for line in hot)
        instr = collections.Counter()
        for a, n in executed.items():
            instr[function_of[a]] += n
        for fn, lines in per_fn.most_common(top):
            name = re.sub(r"<[^<>]*>", "", fn or "?")[:100]
            print(f"{lines:5d} lines {instr[fn] / requests:8.0f} instr/req  {name}")


if __name__ == "__main__":
    main()
