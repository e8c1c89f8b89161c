"""Fixtures: a real `levee mock` and a real `levee serve` per test, on free
127.0.0.1 ports, always stopped afterwards; plus readers for the two oracles
the tests count with: Levee's Prometheus metrics and the mock's stats.

The binary comes from $LEVEE_BIN (scripts/python-tests builds it and sets it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 20.0  # seconds; a debug build on a busy 2-core machine


def levee_bin() -> str:
    path = os.environ.get("LEVEE_BIN") or str(REPO / "target" / "debug" / "levee")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no levee binary at {path}: run scripts/python-tests (it builds one) "
            "or set LEVEE_BIN",
            pytrace=False,
        )
    return path


def http(method: str, url: str, body: bytes | None = None, timeout: float = 5.0) -> bytes:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("content-type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


# Every process a test started, to find the ones it left running.
STARTED: list["Process"] = []


class Process:
    """A child process whose stderr goes to a file (no pipe to fill up)."""

    def __init__(self, name: str, args: list[str], workdir: Path, env: dict | None = None):
        STARTED.append(self)
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_COLOR": "1", **(env or {})},
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_line(self, pattern: str) -> re.Match:
        rx = re.compile(pattern)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            for line in self.log().splitlines():
                m = rx.search(line)
                if m:
                    return m
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready:\n{self.log()}"
                )
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} not ready within {STARTUP_TIMEOUT}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            http("GET", url, timeout=1.0)
            return
        except (urllib.error.URLError, OSError) as e:
            last = e
            time.sleep(0.02)
    raise RuntimeError(f"{url} not ready within {STARTUP_TIMEOUT}s: {last}")


class Mock:
    """`levee mock` on a free port; its stats are the provider-side oracle."""

    def __init__(self, workdir: Path, api: str = "both", name: str = "mock", extra_args: tuple[str, ...] = ()):
        self.process = Process(
            name,
            [levee_bin(), "mock", "--listen", "127.0.0.1:0", "--seed", "7", "--api", api, *extra_args],
            workdir,
        )
        m = self.process.wait_for_line(r"levee mock listening on (\S+)")
        self.addr = m.group(1)
        self.url = f"http://{self.addr}"
        wait_ready(self.url + "/_mock/stats")

    def set_faults(self, *faults: dict) -> None:
        """Replaces the fault set; windows count from now."""
        http("POST", self.url + "/_mock/faults", json.dumps({"faults": list(faults)}).encode())

    def stats(self) -> dict:
        return json.loads(http("GET", self.url + "/_mock/stats"))

    def reset(self) -> None:
        http("POST", self.url + "/_mock/reset", b"")


class Gateway:
    """`levee serve --config FILE` in front of the mock, on free ports."""

    def __init__(
        self,
        workdir: Path,
        mock: Mock,
        route: str,
        name: str = "gateway",
        listen: str = "127.0.0.1:0",
        extra_args: tuple[str, ...] = (),
        config: str | None = None,
        env: dict | None = None,
    ):
        """`config`: the providers and routes to serve instead of the two
        dialects on `mock` (then `mock` and `route` are not used); `env`:
        variables added to the gateway's environment (keys, credentials)."""
        self.config_path = workdir / ("levee.yaml" if name == "gateway" else f"{name}.yaml")
        if config is None:
            config = (
                "providers:\n"
                f'  openai: {{ api: openai, base_url: "{mock.url}" }}\n'
                f'  anthropic: {{ api: anthropic, base_url: "{mock.url}" }}\n'
                "routes:\n"
                f"  - match: {{ path: /v1/messages }}\n    targets: [anthropic]\n{route}"
                f"  - targets: [openai]\n{route}"
            )
        self.config_path.write_text(
            f"listen: {listen}\n" "admin: { listen: 127.0.0.1:0 }\n" + config
        )
        self.process = Process(
            name,
            [
                levee_bin(),
                "serve",
                "--config",
                str(self.config_path),
                "--log-format",
                "json",
                "--seed",
                "42",
                *extra_args,
            ],
            workdir,
            env=env,
        )
        # `--log-format json`: one object per line; this one names both addresses.
        m = self.process.wait_for_line(r'^\{.*"levee gateway listening".*\}\s*$')
        line = json.loads(m.group(0))
        self.addr = line["listen"]
        self.admin = line["admin"]
        self.url = f"http://{self.addr}"
        wait_ready(f"http://{self.admin}/healthz")

    def metrics(self) -> str:
        return http("GET", f"http://{self.admin}/metrics").decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of `name`'s samples whose labels include all of `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(m.group(3))
        return total

    def requests(self) -> float:
        """Logical requests Levee answered (all routes, all outcomes)."""
        return self.metric("levee_requests_total")


# The route every test uses unless it passes its own: the two-layer-storm incident's retry block
# with fast backoff, and a breaker that a handful of test calls cannot open.
DEFAULT_ROUTE = (
    "    retry:\n"
    "      max_attempts: 3\n"
    "      on: [429, 502, 503, 504, connect_error]\n"
    "      backoff: { base_ms: 10, multiplier: 2, max_ms: 50, jitter: full }\n"
    "      budget: { ratio: 0.1, min_per_second: 5 }\n"
    "      respect_retry_after: true\n"
    "    circuit_breaker: { error_ratio: 0.5, window: 10s, min_requests: 1000, open_for: 5s }\n"
    "    expected_attempt_ms: 500\n"
    "    deadline: { default: 30s, max: 120s }\n"
)


@pytest.fixture(autouse=True)
def no_process_left_running():
    """A test stops every process it starts: one left running is stopped
    here and fails the test (it would outlive the suite)."""
    before = len(STARTED)
    yield
    left = [p for p in STARTED[before:] if p.proc.poll() is None]
    for p in left:
        p.stop()
    del STARTED[before:]
    assert not left, f"left running: {[p.name for p in left]}"


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="levee-py-") as d:
        yield Path(d)


def running_mock(workdir: Path, api: str | None = None):
    """A `levee mock` (of `api`'s face when given), stopped when the test
    ends: the body of each mock fixture."""
    m = Mock(workdir, api=api, name=f"mock-{api}") if api else Mock(workdir)
    try:
        yield m
    finally:
        m.process.stop()


@pytest.fixture
def mock(workdir):
    yield from running_mock(workdir)


# One question and one tool, in the Anthropic Messages shape, for the
# exchanges the cloud tests run through the official SDK.
WEATHER_MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER_TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
FORCE_WEATHER = {"type": "tool", "name": "get_weather"}


def check_messages(client, model: str, stream_tool: bool = True) -> None:
    """JSON, forced tool use and a stream through an Anthropic SDK
    `client`, each checked for its shape; with `stream_tool`, a streamed
    forced tool use too."""
    r = client.messages.create(model=model, max_tokens=64, messages=WEATHER_MESSAGES)
    assert r.type == "message" and r.content[0].type == "text" and r.content[0].text
    assert r.usage.input_tokens > 0

    r = client.messages.create(
        model=model,
        max_tokens=64,
        messages=WEATHER_MESSAGES,
        tools=WEATHER_TOOLS,
        tool_choice=FORCE_WEATHER,
    )
    assert r.stop_reason == "tool_use"
    assert r.content[0].type == "tool_use" and r.content[0].name == "get_weather"

    with client.messages.stream(model=model, max_tokens=64, messages=WEATHER_MESSAGES) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text and final.stop_reason == "end_turn"

    if stream_tool:
        with client.messages.stream(
            model=model,
            max_tokens=64,
            messages=WEATHER_MESSAGES,
            tools=WEATHER_TOOLS,
            tool_choice=FORCE_WEATHER,
        ) as s:
            final = s.get_final_message()
        assert final.content[0].type == "tool_use"


@pytest.fixture
def start_gateway(workdir, mock):
    """Call with route YAML (indented under a route) to start a gateway."""
    started: list[Gateway] = []

    def start(route: str = DEFAULT_ROUTE) -> Gateway:
        gw = Gateway(workdir, mock, route)
        started.append(gw)
        return gw

    try:
        yield start
    finally:
        for gw in started:
            gw.process.stop()


@pytest.fixture
def gateway(start_gateway):
    return start_gateway()
