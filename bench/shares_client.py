"""The six callers of scenarios/shares.yaml, live: open-loop Poisson arrivals
per caller, each through the official `openai` SDK at its defaults
(max_retries 2, honours retry-after and x-should-retry) and identified by
`x-levee-caller: NAME`. The broken caller (`draft`, model
`draft-with-tools`) is also wrapped in its own retry loop: 5 attempts on any
error, sleeping 1, 2, 4, 8 s between them. Prints one JSON line per caller
and one for the run (`"caller": "*"`).

    shares_client.py BASE_URL SECONDS [SEED]

Arrivals stop at SECONDS; the calls still running are waited for. The same
SEED gives every path the same arrival times. Loopback only: the caller
passes a 127.0.0.1 URL (bench/shares.sh does).
"""
import asyncio
import json
import random
import sys
import time

import openai
from openai import AsyncOpenAI

# name, model, calls per minute, wrapped by its own retry loop
CALLERS = [
    ("draft", "draft-with-tools", 140, True),
    ("search", "search", 400, False),
    ("summarise", "summarise", 350, False),
    ("classify", "classify", 300, False),
    ("translate", "translate", 250, False),
    ("extract", "extract", 150, False),
]
WRAPPER_SLEEPS = [1, 2, 4, 8]  # between the wrapper's 5 attempts


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 3)


class Books:
    def __init__(self):
        self.calls = 0
        self.ok = 0
        self.errors = {}  # the call's final error, by SDK type
        self.latencies = []
        self.attempts = 0  # SDK calls made (the wrapper's attempts)
        self.attempt_errors = {}  # every SDK call's error, by type

    def row(self, name, model, per_minute, seconds):
        return {
            "caller": name, "model": model, "per_minute": per_minute,
            "calls": self.calls, "successes": self.ok,
            "success_pct": round(100 * self.ok / max(self.calls, 1), 1),
            "app_429s": self.errors.get("RateLimitError", 0),
            "errors": self.errors,
            "sdk_calls": self.attempts, "sdk_call_errors": self.attempt_errors,
            "p50_s": pct(self.latencies, 0.50), "p99_s": pct(self.latencies, 0.99),
        }


async def main(base_url: str, seconds: float, seed: int) -> None:
    books = {name: Books() for name, *_ in CALLERS}
    late = []  # how late each call started against its schedule (s)
    tasks = []

    async def sdk_call(client, model, b):
        b.attempts += 1
        try:
            await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}]
            )
        except Exception as e:  # the SDK's own error types: counted by name
            name = type(e).__name__
            b.attempt_errors[name] = b.attempt_errors.get(name, 0) + 1
            raise

    async def one(client, model, wrapped, b):
        t0 = time.monotonic()
        try:
            if wrapped:
                for i in range(len(WRAPPER_SLEEPS) + 1):
                    try:
                        await sdk_call(client, model, b)
                        break
                    except Exception:
                        if i == len(WRAPPER_SLEEPS):
                            raise
                        await asyncio.sleep(WRAPPER_SLEEPS[i])
            else:
                await sdk_call(client, model, b)
            b.ok += 1
        except Exception as e:
            name = type(e).__name__
            b.errors[name] = b.errors.get(name, 0) + 1
        b.latencies.append(time.monotonic() - t0)

    async def arrivals(idx, name, model, per_minute, wrapped, start):
        client = AsyncOpenAI(base_url=base_url, api_key="bench",
                             default_headers={"x-levee-caller": name})
        rng = random.Random(seed * 1000 + idx)
        rate = per_minute / 60.0
        t = rng.expovariate(rate)
        b = books[name]
        while t < seconds:
            delay = start + t - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            late.append(max(0.0, -delay))
            b.calls += 1
            tasks.append(asyncio.create_task(one(client, model, wrapped, b)))
            t += rng.expovariate(rate)

    start = time.monotonic()
    await asyncio.gather(*(arrivals(i, *c, start) for i, c in enumerate(CALLERS)))
    await asyncio.gather(*tasks)
    elapsed = time.monotonic() - start

    total = Books()
    for name, model, per_minute, _ in CALLERS:
        b = books[name]
        print(json.dumps(b.row(name, model, per_minute, seconds)))
        total.calls += b.calls
        total.ok += b.ok
        total.attempts += b.attempts
    healthy = [books[n] for n, _, _, w in CALLERS if not w]
    h_calls = sum(b.calls for b in healthy)
    h_ok = sum(b.ok for b in healthy)
    print(json.dumps({
        "caller": "*", "calls": total.calls, "successes": total.ok,
        "sdk_calls": total.attempts,
        "healthy_calls": h_calls, "healthy_success_pct": round(100 * h_ok / max(h_calls, 1), 2),
        "healthy_app_429s": sum(b.errors.get("RateLimitError", 0) for b in healthy),
        "healthy_p99_s": pct([x for b in healthy for x in b.latencies], 0.99),
        "start_lateness_p99_s": pct(late, 0.99), "start_lateness_max_s": pct(late, 1.0),
        "elapsed_s": round(elapsed, 1),
    }))


if __name__ == "__main__":
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), seed))
