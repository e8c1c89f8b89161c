#!/usr/bin/env python3
"""Hold N concurrent SSE chat-completion streams open against one HTTP/1.1 server.

Stdlib only (asyncio protocols over raw sockets). Used by bench/streams.sh:

    streams_client.py --port P --count 10000 --rate 2500 --timeout 90 \
        [--ready-file F] [--progress]

Opens `count` connections, `rate` per second (open loop: the schedule does not
wait for answers), each sending one POST /v1/chat/completions with
"stream": true, then reads the stream to its end (`data: [DONE]` or the
terminating chunk). Per stream it records the time from writing the request
to the first body byte after the response head (TTFB). When every stream has
either its first body byte or an error, it writes the number of streams then
open (first byte seen, not finished) to --ready-file, so the caller can read
server memory while they are all in flight. It stops by itself at --timeout,
closing whatever is still open. Prints one JSON object on stdout.
"""

import argparse
import asyncio
import gc
import json
import os
import sys
import time


def pct(sorted_vals, q):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, max(0, int(q * len(sorted_vals) + 0.999999) - 1))
    return sorted_vals[i]


class Run:
    def __init__(self, count):
        self.count = count
        self.ttfb = []  # seconds
        self.samples = []  # (seconds since start when sent, ttfb) for --dump
        self.t0 = 0.0
        self.open_now = 0  # first byte seen, not finished
        self.max_open = 0
        self.done_ok = 0
        self.errors = {}
        self.settled = 0  # first byte or error
        self.ready_fired = False
        self.ready_file = None
        self.transports = set()
        self.all_settled = None
        self.all_finished = None
        self.finished = 0

    def error(self, kind):
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def settle(self):
        self.settled += 1
        if self.settled == self.count and not self.ready_fired:
            self.ready_fired = True
            if self.ready_file:
                tmp = self.ready_file + ".tmp"
                with open(tmp, "w") as f:
                    f.write(f"{self.open_now}\n")
                os.replace(tmp, self.ready_file)
            self.all_settled.set()

    def finish(self):
        self.finished += 1
        if self.finished == self.count:
            self.all_finished.set()


class Stream(asyncio.Protocol):
    def __init__(self, run, request):
        self.run = run
        self.request = request
        self.t_sent = None
        self.buf = b""
        self.head_done = False
        self.first = False
        self.tail = b""
        self.over = False
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.run.transports.add(transport)
        self.t_sent = time.perf_counter()
        transport.write(self.request)

    def data_received(self, data):
        now = time.perf_counter()
        if self.over:
            return
        if not self.head_done:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            status = head.split(b"\r\n", 1)[0].split(b" ")
            if len(status) < 2 or status[1] != b"200":
                code = status[1].decode(errors="replace") if len(status) > 1 else "?"
                self.fail(f"http_{code}")
                return
            self.head_done = True
            data = self.buf[end + 4:]
            self.buf = b""
        if data and not self.first:
            self.first = True
            self.run.ttfb.append(now - self.t_sent)
            self.run.samples.append((self.t_sent - self.run.t0, now - self.t_sent))
            self.run.open_now += 1
            self.run.max_open = max(self.run.max_open, self.run.open_now)
            self.run.settle()
        if data:
            window = self.tail + data
            if b"data: [DONE]" in window or window.endswith(b"\r\n0\r\n\r\n"):
                self.over = True
                self.run.open_now -= 1
                self.run.done_ok += 1
                self.run.finish()
                self.transport.close()
                return
            self.tail = window[-16:]

    def fail(self, kind):
        if self.over:
            return
        self.over = True
        self.run.error(kind)
        if self.first:
            self.run.open_now -= 1
        else:
            self.run.settle()
        self.run.finish()
        if self.transport:
            self.transport.close()

    def connection_lost(self, exc):
        self.run.transports.discard(self.transport)
        if not self.over:
            self.fail("closed_early" if self.first else "closed_before_first_byte")


async def open_one(loop, run, host, port, request):
    try:
        await loop.create_connection(lambda: Stream(run, request), host, port)
    except OSError as e:
        run.error(f"connect_{e.errno}")
        run.settle()
        run.finish()


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=2500.0, help="new streams per second")
    ap.add_argument("--timeout", type=float, default=90.0, help="hard stop, seconds")
    ap.add_argument("--model", default="gpt-4o-mini")
    ap.add_argument("--ready-file")
    ap.add_argument("--progress", action="store_true", help="progress line on stderr")
    ap.add_argument("--dump", help="write 'sent_at_s ttfb_s' per stream to this file")
    a = ap.parse_args()
    # A collection pass over 10k live protocol objects stalls the loop for
    # milliseconds and would show up as TTFB; the run is bounded, so skip it.
    gc.disable()

    body = json.dumps({
        "model": a.model,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello."}],
    }).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {a.host}:{a.port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    loop = asyncio.get_running_loop()
    run = Run(a.count)
    run.ready_file = a.ready_file
    run.all_settled = asyncio.Event()
    run.all_finished = asyncio.Event()
    t0 = time.perf_counter()
    run.t0 = t0
    tasks = []

    async def opener():
        for i in range(a.count):
            due = t0 + i / a.rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(open_one(loop, run, a.host, a.port, request)))

    async def progress():
        while True:
            await asyncio.sleep(0.5)
            sys.stderr.write(
                f"\r  streams: {len(tasks)}/{a.count} opened, {run.open_now} open, "
                f"{run.done_ok} done, {sum(run.errors.values())} errors, "
                f"{time.perf_counter() - t0:5.1f}s  "
            )
            sys.stderr.flush()

    prog = asyncio.ensure_future(progress()) if a.progress else None
    op = asyncio.ensure_future(opener())
    timed_out = False
    try:
        await asyncio.wait_for(run.all_finished.wait(), a.timeout)
    except asyncio.TimeoutError:
        timed_out = True
    op.cancel()
    if prog:
        prog.cancel()
        sys.stderr.write("\n")
    still_open = len(run.transports)
    for t in list(run.transports):
        t.abort()
    elapsed = time.perf_counter() - t0
    if a.dump:
        with open(a.dump, "w") as f:
            for sent, tt in run.samples:
                f.write(f"{sent:.6f} {tt:.6f}\n")
    ttfb = sorted(run.ttfb)
    ms = lambda v: None if v is None else round(v * 1000, 3)
    print(json.dumps({
        "count": a.count,
        "rate": a.rate,
        "elapsed_s": round(elapsed, 2),
        "timed_out": timed_out,
        "first_bytes": len(ttfb),
        "completed": run.done_ok,
        "max_open": run.max_open,
        "still_open_at_end": still_open,
        "errors": run.errors,
        "ttfb_ms": {
            "p50": ms(pct(ttfb, 0.50)),
            "p90": ms(pct(ttfb, 0.90)),
            "p99": ms(pct(ttfb, 0.99)),
            "p99.9": ms(pct(ttfb, 0.999)),
            "max": ms(ttfb[-1] if ttfb else None),
        },
    }))


if __name__ == "__main__":
    asyncio.run(main())
