"""The application side of bench/incidents.sh: one incident story, one path
(the official SDK straight at `levee mock`, or through `levee serve`), with
the official `openai` / `anthropic` SDKs at their default settings unless the
story says otherwise. Prints one JSON object on stdout.

    incidents_client.py STORY --path direct|levee --base-url URL
        --mock NAME=URL [--mock NAME=URL] [--faults FILE]
        [--admin URL] [--primary NAME] [--backup NAME] [--model M]
    incidents_client.py report --out FILE.md  RESULTS.jsonl...

Everything reported is observed: what the SDK returned (and the response
heads it exposes: x-levee-target, x-levee-reason, x-levee-attempts), the
mocks' own counters (GET /_mock/stats, before and after) and, through Levee,
the admin /metrics `levee_circuit_state` polled every 100 ms. With
`--faults FILE` the document is POSTed to the first mock at the load's t=0,
which restarts the mock's fault clock, so `from`/`to` windows are relative
to the first call. Loopback only: bench/incidents.sh passes 127.0.0.1 URLs.
Progress goes to stderr only when stderr is a terminal.
"""
import argparse
import asyncio
import inspect
import json
import re
import sys
import time
import urllib.request

PROGRESS = sys.stderr.isatty()


def progress(msg: str) -> None:
    if PROGRESS:
        print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Plain HTTP to the mocks' and the gateway's control endpoints (stdlib only).


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read()


def http_post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"content-type": "application/yaml"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read()


def mock_stats(mocks: dict) -> dict:
    return {name: json.loads(http_get(f"{url}/_mock/stats")) for name, url in mocks.items()}


def stats_delta(before: dict, after: dict) -> dict:
    out = {}
    for name in after:
        b, a = before[name], after[name]
        by_status = {k: v - b["by_status"].get(k, 0) for k, v in a["by_status"].items()
                     if v - b["by_status"].get(k, 0)}
        out[name] = {"requests": a["requests_total"] - b["requests_total"],
                     "by_status": by_status,
                     "client_closed": a["client_closed"] - b["client_closed"],
                     "max_in_flight": a["max_in_flight"]}
    return out


COUNTERS = re.compile(r'^(levee_(?:requests|upstream_attempts|rejected|fallbacks)_total)'
                      r'\{([^}]*)\}\s+(\S+)$', re.M)


def gateway_counters(admin: str) -> dict:
    """Levee's own counts, non-zero ones: requests by outcome, upstream
    attempts by provider and result, rejections by reason, fallbacks."""
    out: dict = {}
    for name, labels, value in COUNTERS.findall(http_get(f"{admin}/metrics").decode()):
        v = float(value)
        if v:
            short = name[len("levee_"):-len("_total")]
            lab = ",".join(x.split("=", 1)[1].strip('"') for x in labels.split(",") if x)
            out.setdefault(short, {})[lab] = int(v)
    return out


# The provider-wide series (model=""); each model has its own beside it.
CIRCUIT = re.compile(r'^levee_circuit_state\{provider="([^"]+)",model=""\}\s+(\S+)', re.M)


def circuit_states(admin: str) -> dict:
    text = http_get(f"{admin}/metrics").decode()
    return {p: int(float(v)) for p, v in CIRCUIT.findall(text)}


class CircuitPoller:
    """Polls levee_circuit_state every 100 ms; keeps each provider's changes."""

    def __init__(self, admin: str, t0: float):
        self.admin, self.t0 = admin, t0
        self.last: dict = {}
        self.changes: dict = {}   # provider -> [[t, state], ...]
        self.errors = 0
        self.task = None

    async def run(self) -> None:
        while True:
            t = time.monotonic() - self.t0
            try:
                states = await asyncio.to_thread(circuit_states, self.admin)
            except Exception:  # a missed poll is counted, never guessed
                self.errors += 1
                states = {}
            for p, s in states.items():
                if self.last.get(p) != s:
                    self.changes.setdefault(p, []).append([round(t, 2), s])
                    self.last[p] = s
            await asyncio.sleep(0.1)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass

    def first(self, provider: str, state: int):
        for t, s in self.changes.get(provider, []):
            if s == state:
                return t
        return None


# --------------------------------------------------------------------------
# One call through an SDK, observed.


class Caller:
    def __init__(self, sdk: str, base_url: str, model: str, timeout=None,
                 headers=None, max_tokens: int = 64):
        kw = {"api_key": "bench"}
        if timeout is not None:
            kw["timeout"] = timeout
        if headers:
            kw["default_headers"] = headers
        self.sdk, self.model, self.max_tokens = sdk, model, max_tokens
        if sdk == "openai":
            from openai import AsyncOpenAI
            self.client = AsyncOpenAI(base_url=base_url, **kw)
        else:
            from anthropic import AsyncAnthropic
            self.client = AsyncAnthropic(base_url=base_url, **kw)

    async def call(self, t0: float) -> dict:
        rec = {"t": round(time.monotonic() - t0, 3)}
        start = time.monotonic()
        try:
            if self.sdk == "openai":
                raw = await self.client.chat.completions.with_raw_response.create(
                    model=self.model, messages=[{"role": "user", "content": "hi"}])
            else:
                raw = await self.client.messages.with_raw_response.create(
                    model=self.model, max_tokens=self.max_tokens,
                    messages=[{"role": "user", "content": "hi"}])
            parsed = raw.parse()   # sync for openai's legacy raw response, async for anthropic's
            if inspect.isawaitable(parsed):
                await parsed
            rec.update(ok=True, status=raw.status_code, target=raw.headers.get("x-levee-target"),
                       attempts=raw.headers.get("x-levee-attempts"))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the SDK's own error types, counted by name
            rec.update(ok=False, err=type(e).__name__)
            resp = getattr(e, "response", None)
            if resp is not None:
                rec.update(status=resp.status_code, reason=resp.headers.get("x-levee-reason"),
                           target=resp.headers.get("x-levee-target"),
                           attempts=resp.headers.get("x-levee-attempts"))
        rec["dt"] = round(time.monotonic() - start, 3)
        return rec


async def open_loop(caller: Caller, rate: float, seconds: float, t0: float, bound: float,
                    label: str = "") -> dict:
    """Starts rate*seconds calls on schedule regardless of completions; calls
    still running `bound` seconds after t0 are cancelled and counted."""
    n = int(rate * seconds)
    tasks, lag = [], 0.0
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = max(lag, time.monotonic() - due)
        tasks.append(asyncio.create_task(caller.call(t0)))
        if PROGRESS and i % max(1, int(rate) * 5) == 0:
            done = sum(t.done() for t in tasks)
            progress(f"{label} {i}/{n} started, {done} done")
    left = bound - (time.monotonic() - t0)
    done, pending = await asyncio.wait(tasks, timeout=max(0.0, left))
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return {"records": [t.result() for t in done], "calls": n,
            "unfinished": len(pending), "start_lag_max_s": round(lag, 3)}


# --------------------------------------------------------------------------
# Summaries.


def pct(values: list, q: float):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 3)


def count(items) -> dict:
    out: dict = {}
    for x in items:
        out[str(x)] = out.get(str(x), 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def summarize(records: list, calls: int) -> dict:
    ok = [r for r in records if r["ok"]]
    bad = [r for r in records if not r["ok"]]
    return {
        "calls": calls,
        "successes": len(ok),
        "success_pct": round(100 * len(ok) / calls, 1) if calls else None,
        "p50_s": pct([r["dt"] for r in records], 0.50),
        "p99_s": pct([r["dt"] for r in records], 0.99),
        "errors": count(f"{r['err']}:{r.get('status', '-')}" for r in bad),
        "reasons": count(r.get("reason") for r in bad if r.get("reason")),
        "answered_by": count(r.get("target") or "-" for r in ok),
    }


def upstream(delta: dict, calls: int) -> dict:
    total = sum(m["requests"] for m in delta.values())
    return {"upstream_requests": total,
            "upstream_per_call": round(total / calls, 2) if calls else None,
            "mocks": delta}


# --------------------------------------------------------------------------
# The stories.


async def story_open_loop(a, sdk: str, rate: float, seconds: float, bound: float,
                          timeout=None, headers=None) -> dict:
    caller = Caller(sdk, a.base_url, a.model, timeout=timeout, headers=headers)
    before = mock_stats(a.mocks)
    t0 = time.monotonic()
    restart_faults(a)
    poller = None
    if a.admin:
        poller = CircuitPoller(a.admin, t0)
        poller.start()
    run = await open_loop(caller, rate, seconds, t0, bound, f"{a.story}/{a.path}")
    if poller:
        await poller.stop()
    await asyncio.sleep(0.2)  # let the mocks see the last cancellations
    delta = stats_delta(before, mock_stats(a.mocks))
    out = {"rate": rate, "seconds": seconds, **summarize(run["records"], run["calls"]),
           "unfinished": run["unfinished"], "start_lag_max_s": run["start_lag_max_s"],
           **upstream(delta, run["calls"])}
    if poller:
        out["circuit_changes"] = poller.changes
    return out, run["records"], poller


def restart_faults(a) -> None:
    if a.faults:
        with open(a.faults, "rb") as f:
            http_post(f"{next(iter(a.mocks.values()))}/_mock/faults", f.read())


async def storm(a):
    out, records, _ = await story_open_loop(a, "openai", 20, 30, bound=180)
    if a.backup and a.path == "levee":   # x-levee-target exists only through Levee
        ok = [r for r in records if r["ok"]]
        prim = sum(1 for r in ok if r.get("target") == a.primary)
        out["primary_share_of_successes_pct"] = round(100 * prim / len(ok), 1) if ok else None
    return out


async def brownout(a):
    out, _, _ = await story_open_loop(a, "openai", 40, 20, bound=180)
    return out


async def saturated(a):
    out, _, _ = await story_open_loop(a, "openai", 150, 20, bound=180)
    out["offered_calls"] = out["calls"]
    return out


async def stall(a):
    stall_from, stall_to = 5.0, 25.0
    out, records, poller = await story_open_loop(
        a, a.sdk, 10, 35, bound=120, timeout=9.0, headers={"x-timeout-ms": "8000"})
    phases = {"before_stall": (0, stall_from), "stall_first_10s": (stall_from, stall_from + 10),
              "stall_last_10s": (stall_from + 10, stall_to), "after_stall": (stall_to, 1e9)}
    out["by_phase"] = {}
    for name, (lo, hi) in phases.items():
        rs = [r for r in records if lo <= r["t"] < hi]
        ok = [r for r in rs if r["ok"]]
        out["by_phase"][name] = {
            "calls": len(rs), "success_pct": round(100 * len(ok) / len(rs), 1) if rs else None,
            "by_backup_pct": (round(100 * sum(r.get("target") == a.backup for r in ok) / len(rs), 1)
                              if rs and a.backup else None)}
    late = out["by_phase"]["stall_last_10s"]
    out["calls_15_25s_answered_by_backup_pct"] = late["by_backup_pct"]
    if poller:
        opened = poller.first(a.primary, 1)
        out["breaker_opened_after_stall_start_s"] = (round(opened - stall_from, 2)
                                                     if opened is not None else None)
        back = sorted((r for r in records if r["ok"] and r["t"] >= stall_to
                       and r.get("target") == a.primary), key=lambda r: r["t"])
        out["back_to_primary_after_stall_end_s"] = (round(back[0]["t"] - stall_to, 2)
                                                    if back else None)
    return out


async def short_timeout(a):
    caller = Caller("anthropic", a.base_url, a.model, timeout=10.0)
    before = mock_stats(a.mocks)
    t0 = time.monotonic()
    restart_faults(a)
    records = await asyncio.wait_for(
        asyncio.gather(*(caller.call(t0) for _ in range(20))), timeout=120)
    await asyncio.sleep(0.2)
    delta = stats_delta(before, mock_stats(a.mocks))
    return {"calls": 20, "sdk_timeout_s": 10, **summarize(records, 20),
            "attempts_header": count(r.get("attempts") for r in records),
            **upstream(delta, 20)}


async def breaker_ramp(a):
    fault_to = 5.0        # the window in the faults file: { status: 503, from: 0s, to: 5s }
    caller = Caller("openai", a.base_url, a.model)
    before = mock_stats(a.mocks)
    t0 = time.monotonic()
    restart_faults(a)
    burst = await asyncio.wait_for(asyncio.gather(*(caller.call(t0) for _ in range(40))),
                                   timeout=120)
    burst_done = time.monotonic() - t0
    progress(f"breaker-ramp/{a.path} burst done at {burst_done:.1f}s")
    state_at = (lambda: circuit_states(a.admin).get(a.primary)) if a.admin else (lambda: None)
    state_after_burst = await asyncio.to_thread(state_at)
    ramp_start = max(fault_to, burst_done) + 10.0
    await asyncio.sleep(max(0.0, t0 + ramp_start - time.monotonic()))
    seconds = []
    for s in range(10):
        due = t0 + ramp_start + s
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        state = await asyncio.to_thread(state_at)
        rs = []
        for _ in range(10):
            rs.append(await caller.call(t0))
        seconds.append({"s": s, "started_at_s": round(due - t0, 2), "circuit_state": state,
                        "codes": [r.get("status") or r.get("err") for r in rs],
                        "circuit_open": sum(r.get("reason") == "circuit_open" for r in rs),
                        "took_s": round(time.monotonic() - due, 3)})
    await asyncio.sleep(0.2)
    delta = stats_delta(before, mock_stats(a.mocks))
    ramp_calls = 100
    ok = sum(c == 200 for sec in seconds for c in sec["codes"])
    return {"burst": {"calls": 40, **summarize(burst, 40), "done_s": round(burst_done, 2),
                      "inside_fault_window": burst_done < fault_to,
                      "circuit_state_after": state_after_burst},
            "ramp_started_at_s": ramp_start,
            "ramp_successes": ok, "ramp_calls": ramp_calls,
            "ramp_circuit_open": sum(sec["circuit_open"] for sec in seconds),
            "ramp": seconds, **upstream(delta, 40 + ramp_calls)}


async def long_stream(a):
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=a.base_url, api_key="bench")
    before = mock_stats(a.mocks)
    t0 = time.monotonic()
    restart_faults(a)
    out = {"chunks": 0, "finish_reason": None, "text": ""}

    async def run():
        stream = await client.chat.completions.create(
            model=a.model, messages=[{"role": "user", "content": "hi"}], stream=True)
        out["target"] = stream.response.headers.get("x-levee-target")
        async for chunk in stream:
            out["chunks"] += 1
            if out["chunks"] % 2 == 0:
                progress(f"long-stream/{a.path} {out['chunks']} chunks at {time.monotonic() - t0:.0f}s")
            for c in chunk.choices:
                out["text"] += c.delta.content or ""
                out["finish_reason"] = c.finish_reason or out["finish_reason"]

    try:
        await asyncio.wait_for(run(), timeout=240)
        out["completed"] = out["finish_reason"] == "stop"
    except asyncio.TimeoutError:
        out.update(completed=False, err="bound_240s")
    except Exception as e:
        out.update(completed=False, err=type(e).__name__, message=str(e)[:200])
        resp = getattr(e, "response", None)
        if resp is not None:
            out["reason"] = resp.headers.get("x-levee-reason")
    out["duration_s"] = round(time.monotonic() - t0, 1)
    await asyncio.sleep(0.2)
    out.update(upstream(stats_delta(before, mock_stats(a.mocks)), 1))
    return out


async def random_loss(a):
    out, _, _ = await story_open_loop(a, "openai", 20, 40, bound=180)
    return out


async def outage(a):
    out, _, _ = await story_open_loop(a, "openai", 20, 20, bound=180)
    return out


async def backup_overload(a):
    """20 calls one after another; each call's time and who answered it."""
    caller = Caller("anthropic", a.base_url, a.model)
    before = mock_stats(a.mocks)
    t0 = time.monotonic()
    restart_faults(a)
    records = []
    for _ in range(20):
        records.append(await asyncio.wait_for(caller.call(t0), timeout=120))
    await asyncio.sleep(0.2)
    delta = stats_delta(before, mock_stats(a.mocks))
    return {"calls": 20, **summarize(records, 20),
            "max_s": max(r["dt"] for r in records),
            "first_call_s": records[0]["dt"],
            **upstream(delta, 20)}


STORIES = {"random-loss": random_loss, "outage": outage, "backup-overload": backup_overload,
           "storm": storm, "storm-backup": storm, "stall": stall,
           "breaker-ramp": breaker_ramp, "long-stream": long_stream,
           "short-timeout": short_timeout, "saturated": saturated, "brownout": brownout}


# --------------------------------------------------------------------------
# The markdown table: one row per story and measure, one column per run file.


def fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, dict):
        return ", ".join(f"{k} {n}" for k, n in v.items()) or "none"
    if isinstance(v, list):
        if v and all(isinstance(x, list) and len(x) == 2 for x in v):   # [[t, state], ...]
            return ", ".join(f"{t} s→{st}" for t, st in v)
        return " ".join("—" if x is None else str(x) for x in v)
    return str(v)


def ramp_codes(r: dict) -> str:
    parts = []
    for sec in r.get("ramp", []):
        c = count(sec["codes"])
        parts.append("/".join(f"{n}×{k}" for k, n in c.items()))
    return "; ".join(parts)


MEASURES = {
    "storm": ["success_pct", "upstream_per_call", "p50_s", "p99_s", "errors", "reasons",
              "gateway.upstream_attempts"],
    "storm-backup": ["success_pct", "primary_share_of_successes_pct", "upstream_per_call",
                     "mocks.primary.requests", "mocks.backup.requests", "p50_s", "p99_s",
                     "errors", "reasons", "gateway.upstream_attempts", "gateway.fallbacks"],
    "stall": ["success_pct", "by_phase.before_stall.success_pct",
              "by_phase.stall_first_10s.success_pct", "by_phase.stall_last_10s.success_pct",
              "by_phase.after_stall.success_pct", "calls_15_25s_answered_by_backup_pct",
              "breaker_opened_after_stall_start_s", "back_to_primary_after_stall_end_s",
              "circuit_changes.anthropic",
              "upstream_per_call", "p99_s", "errors", "reasons", "gateway.upstream_attempts",
              "gateway.fallbacks"],
    "breaker-ramp": ["burst.success_pct", "burst.done_s", "burst.circuit_state_after",
                     "ramp_successes", "ramp_circuit_open", "ramp.codes", "ramp.states",
                     "upstream_requests", "gateway.upstream_attempts"],
    "long-stream": ["completed", "duration_s", "chunks", "err", "message"],
    "short-timeout": ["success_pct", "errors", "reasons", "answered_by",
                      "mocks.primary.requests", "mocks.backup.requests", "p50_s",
                      "gateway.upstream_attempts", "gateway.fallbacks"],
    "saturated": ["offered_calls", "start_lag_max_s", "success_pct", "upstream_per_call",
                  "p50_s", "p99_s", "errors", "reasons", "circuit_changes.primary",
                  "gateway.upstream_attempts"],
    "brownout": ["success_pct", "upstream_per_call", "p50_s", "p99_s", "errors", "reasons",
                 "gateway.upstream_attempts"],
    "random-loss": ["success_pct", "upstream_per_call", "p50_s", "p99_s", "errors", "reasons",
                    "circuit_changes.primary", "gateway.upstream_attempts"],
    "backup-overload": ["success_pct", "answered_by", "first_call_s", "p99_s", "max_s",
                        "mocks.primary.requests", "mocks.backup.requests", "errors",
                        "gateway.upstream_attempts", "gateway.fallbacks"],
    "outage": ["success_pct", "upstream_per_call", "p50_s", "p99_s", "errors", "reasons",
               "gateway.upstream_attempts"],
}


def lookup(r: dict, key: str):
    if key == "ramp.codes":
        return ramp_codes(r)
    if key == "ramp.states":
        return [sec["circuit_state"] for sec in r.get("ramp", [])] if r.get("ramp") else None
    v = r
    for part in key.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v


def report(out: str, files: list) -> None:
    runs = []   # (column, {(story, path): result})
    for f in files:
        col = re.sub(r"^incidents-|\.jsonl$", "", f.rsplit("/", 1)[-1])
        rows = {}
        with open(f) as fh:
            for line in fh:
                if line.strip():
                    r = json.loads(line)
                    rows[(r["story"], r["path"])] = r
        runs.append((col, rows))
    lines = ["| story | measure | " + " | ".join(f"{c} direct | {c} levee" for c, _ in runs) + " |",
             "|---|---|" + "---|---|" * len(runs)]
    for story, measures in MEASURES.items():
        if not any((story, p) in rows for _, rows in runs for p in ("direct", "levee")):
            continue
        for m in measures:
            cells = []
            for _, rows in runs:
                for p in ("direct", "levee"):
                    r = rows.get((story, p))
                    cells.append(fmt(lookup(r, m)) if r else "")
            lines.append(f"| {story} | {m} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    notes = []
    for col, rows in runs:
        seen = sorted({(r["run"]["date"], r["run"]["version"], r["run"]["binary"])
                       for r in rows.values() if "run" in r})
        notes.append(f"- `{col}`: " + "; ".join(f"{d}, {v} (`{b}`)" for d, v, b in seen))
    table = "\n".join(notes) + "\n\n" + "\n".join(lines) + "\n"
    begin, end = "<!-- incidents-table:begin -->", "<!-- incidents-table:end -->"
    try:
        with open(out) as fh:
            doc = fh.read()
    except FileNotFoundError:
        doc = f"# Incident stories\n\n{begin}\n{end}\n"
    if begin not in doc or end not in doc:
        doc += f"\n{begin}\n{end}\n"
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(out, "w") as fh:
        fh.write(f"{head}{begin}\n{table}{end}{tail}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        p = argparse.ArgumentParser()
        p.add_argument("report")
        p.add_argument("--out", required=True)
        p.add_argument("files", nargs="+")
        a = p.parse_args()
        report(a.out, a.files)
        return
    p = argparse.ArgumentParser()
    p.add_argument("story", choices=sorted(STORIES))
    p.add_argument("--path", choices=["direct", "levee"], required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--mock", action="append", required=True, help="NAME=URL; the first gets --faults")
    p.add_argument("--faults")
    p.add_argument("--admin")
    p.add_argument("--primary", default="primary")
    p.add_argument("--backup")
    p.add_argument("--model", default="bench")
    p.add_argument("--sdk", choices=["openai", "anthropic"], default="openai")
    a = p.parse_args()
    a.mocks = dict(m.split("=", 1) for m in a.mock)
    result = asyncio.run(STORIES[a.story](a))
    if a.admin:
        result["gateway"] = gateway_counters(a.admin)
    print(json.dumps({"story": a.story, "path": a.path, **result}))


if __name__ == "__main__":
    main()
