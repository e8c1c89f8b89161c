"""Open-loop load with the official `openai` SDK (default settings) against one
base URL; prints one JSON line: calls, successes, latency percentiles.

    brownout_client.py BASE_URL RATE SECONDS

Loopback only: the caller passes a 127.0.0.1 URL (bench/brownout.sh does).
"""
import asyncio
import json
import sys
import time

from openai import AsyncOpenAI


async def main(base_url: str, rate: float, seconds: float) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key="bench")
    latencies = []
    ok = 0
    errors = {}

    async def one() -> None:
        nonlocal ok
        t0 = time.monotonic()
        try:
            await client.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": "hi"}]
            )
            ok += 1
        except Exception as e:  # the SDK's own error types: counted by name
            name = type(e).__name__
            errors[name] = errors.get(name, 0) + 1
        latencies.append(time.monotonic() - t0)

    n = int(rate * seconds)
    start = time.monotonic()
    tasks = []
    for i in range(n):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))], 3)

    print(json.dumps({"calls": n, "successes": ok, "errors": errors,
                      "p50_s": pct(0.50), "p99_s": pct(0.99)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
