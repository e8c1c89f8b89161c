"""Report helpers shared by the bench scripts' embedded Python (each script
runs from the repository root and imports this with `bench` on sys.path)."""

import collections
import glob
import re
from collections import defaultdict


def bucket_quantiles(pattern):
    """Levee's `levee_added_latency_seconds` histogram merged from the files
    matching `pattern` (lines of `le<TAB>cumulative count`, one file per
    scrape the script kept). Returns (count, q) where q(p) describes the
    p-quantile in milliseconds, interpolated within its bucket, or None when
    no file matched."""
    total = defaultdict(float)
    for f in glob.glob(pattern):
        for line in open(f):
            le, n = line.split("\t")
            total[le] += float(n)
    if not total:
        return None
    bounds = sorted(((float("inf") if le == "+Inf" else float(le)), n) for le, n in total.items())
    count = bounds[-1][1]

    def q(p):
        want = p * count
        prev_b, prev_n = 0.0, 0.0
        for b, n in bounds:
            if n >= want:
                if b == float("inf"):
                    return f"> {prev_b*1e3:.3f} ms"
                frac = (want - prev_n) / (n - prev_n) if n > prev_n else 1.0
                return f"{(prev_b + frac * (b - prev_b))*1e3:.3f} ms (bucket {prev_b*1e3:.2f}-{b*1e3:.2f} ms)"
            prev_b, prev_n = b, n
        return "?"

    return count, q


def callgrind_instructions(path):
    """The instructions a callgrind profile written with `--dump-instr=yes`
    executed, by where they are. Returns (executed, function_of): the count
    of each (object, address), and the function each is in. A call's
    inclusive cost line is skipped: only the instructions themselves
    count."""
    executed = collections.Counter()
    function_of = {}
    objects, names = {}, {}
    ob = fn = None
    addr = 0
    npos = 1
    after_call = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("positions:"):
                npos = len(line.split()[1:])
                continue
            m = re.match(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?", line.strip())
            if m:
                table = objects if m.group(2) == "ob" else names
                if m.group(4):
                    table[m.group(3)] = m.group(4)
                if not m.group(1):
                    if m.group(2) == "ob":
                        ob = objects.get(m.group(3))
                    else:
                        fn = names.get(m.group(3))
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            c = line[0]
            if not (c.isdigit() or c in "+-*"):
                continue
            parts = line.split()
            p = parts[0]
            if p.startswith("0x"):
                addr = int(p, 16)
            elif p[0] == "+":
                addr += int(p[1:])
            elif p[0] == "-":
                addr -= int(p[1:])
            elif p != "*":
                addr = int(p)
            if after_call:
                after_call = False
                continue
            executed[(ob, addr)] += int(parts[npos]) if len(parts) > npos else 0
            function_of[(ob, addr)] = fn
    return executed, function_of
