"""Report helpers shared by the bench scripts' embedded Python (each script
runs from the repository root and imports this with `bench` on sys.path)."""

import glob
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
