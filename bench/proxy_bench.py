"""Added latency of the llm-auth proxy: llama-server direct vs through nginx, without and with the
njs routing, on every nginx build, in one interleaved run. Prints JSON.

    PYTHONPATH=dev .cache/venv/ha/bin/python bench/proxy_bench.py [--requests 300]

Every variant sends the same requests to the same llama-server (tiny deterministic model, one
generated token), so the difference is the proxy's cost:
  plain     nginx's bearer check (njs SHA-256) and a fresh upstream connection, no njs handler;
  routed    the general key: the njs handler reads the body, hashes the conversation start and
            splices in a non-reserved id_slot (the Open WebUI path);
  agent     the agent key naming its reserved slot: the body is parsed, checked and forwarded
            as it came (the voice agent's path).
"ha_sized_body" carries a Home Assistant-sized chat body (system prompt + 30 tools, ~10 KB) to
/completion, which llama-server answers from its short "prompt" alone: njs does the full work
on the big body while llama-server's own time stays small and steady (with the chat endpoint,
tokenising ~10k characters for the tiny model makes upstream noise hide the proxy's cost).

"stall" (also alone: --stall-only) measures what a big general-key body does to the voice
agent's streamed reply through the same nginx worker: the agent's stream (a fake upstream
writes a line every 10 ms) is read while a general client sends the body, and the longest
pause in the stream from sending the body to its answer is recorded. "ours" is body.js as it
is (no more than 1 MB of a body is parsed); "parse_whole" is the same code with every body
parsed whole, as before (its WHOLE limit raised past any body); "no_body" is the longest
pause over the same length of time with nothing sent (the noise of the stream itself).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import itertools
import json
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from voice_stack_dev.llama import start_llama
from voice_stack_dev.nginx import BUILDS, TEST_AGENT_KEY, NginxProxy, start_proxy
from voice_stack_dev.procs import free_port
from voice_stack_dev.rawhttp import call, open_request

PROXY_KEY = "bench-proxy-key_0123456789"


def ha_sized_body() -> dict[str, Any]:
    """About the size of a Home Assistant voice request: a long system prompt and 30 tools."""
    system = "You are a voice assistant for Home Assistant. Answer in one short sentence. " * 40
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"HassTurnOn{n}",
                "description": "Turns on/opens a device or entity",
                "parameters": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "area": {"type": "string"}},
                },
            },
        }
        for n in range(30)
    ]
    return {
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "turn on the kitchen light"},
        ],
        "tools": tools,
        "prompt": "hi",
        "n_predict": 1,
    }


WORKLOADS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "small_chat": (
        "/v1/chat/completions",
        lambda: {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    ),
    "ha_sized_body": ("/completion", ha_sized_body),
}


class Client:
    """One keep-alive connection per variant; reconnects when the server dropped it."""

    def __init__(self, url: str, key: str) -> None:
        self.host = url.split("://", 1)[1]
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection(self.host, timeout=30)

    def post(self, path: str, body: bytes) -> float:
        for attempt in range(2):
            start = time.perf_counter()
            try:
                self.conn.request("POST", path, body, self.headers)
                response = self.conn.getresponse()
                response.read()
            except http.client.HTTPException, OSError:
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, timeout=30)
                if attempt:
                    raise
                continue
            if response.status != 200:
                raise RuntimeError(f"{path}: HTTP {response.status}")
            return (time.perf_counter() - start) * 1000
        raise AssertionError("unreachable")


@dataclass(frozen=True)
class Variant:
    name: str
    client: Client
    pinned: bool  # sends "id_slot": 0 (the agent's reserved slot)


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(0.90 * (len(ordered) - 1))], 3),
    }


def run_workload(
    variants: list[Variant], path: str, payload: dict[str, Any], requests: int
) -> dict[str, Any]:
    bodies = {
        False: json.dumps(payload).encode(),
        True: json.dumps({**payload, "id_slot": 0}).encode(),
    }
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for _ in range(10):  # warm the prompt cache and the connections
        for v in variants:
            v.client.post(path, bodies[v.pinned])
    for i in range(requests):
        shift = i % len(variants)  # rotate, so no variant always goes first
        for v in variants[shift:] + variants[:shift]:
            times[v.name].append(v.client.post(path, bodies[v.pinned]))
    result: dict[str, Any] = {name: summary(samples) for name, samples in times.items()}
    for name, samples in times.items():
        if name != "direct":
            paired = [p - d for p, d in zip(samples, times["direct"], strict=True)]
            result[name]["added_paired_median_ms"] = round(statistics.median(paired), 3)
    result["path"] = path
    result["request_bytes"] = len(bodies[False])
    return result


def ratios(workload: dict[str, Any]) -> dict[str, float]:
    """Each proxy variant's median over direct's, and routed's cost over plain per build."""
    direct = workload["direct"]["median_ms"]
    out = {
        f"{name}_over_direct": round(value["median_ms"] / direct, 3)
        for name, value in workload.items()
        if isinstance(value, dict) and name != "direct"
    }
    for build in BUILDS:
        plain = workload[f"{build.name}/plain"]["median_ms"]
        routed = workload[f"{build.name}/routed"]["median_ms"]
        out[f"{build.name}/njs_routing_cost_ms"] = round(routed - plain, 3)
    return out


# --- stall: a big general-key body while the agent's reply streams ------------------------------

MB = 1024 * 1024
GENERAL = [("Authorization", f"Bearer {PROXY_KEY}")]


def picture_question(megabytes: int) -> bytes:
    """An Open WebUI-style question about a picture: one base64 string of that size."""
    picture = {"url": "data:image/png;base64," + "QUJD" * (megabytes * MB // 4)}
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": picture}]
    return json.dumps({"messages": [{"role": "user", "content": parts}]}).encode()


STALL_BODIES: dict[str, Callable[[], bytes]] = {
    # 30 MB of small JSON values: the most work per byte for JSON.parse
    "small_values_30mb": lambda: (
        b'{"messages":[{"role":"user","content":"hi"}],"x":['
        + b'{"a":{}},' * (30 * MB // 9)
        + b'{"a":{}}]}'
    ),
    "picture_29mb": lambda: picture_question(29),
    "picture_8mb": lambda: picture_question(8),
}


class _Ticker(BaseHTTPRequestHandler):
    """The fake upstream: a stream of lines 10 ms apart when the query asks (?ticks=N), else a
    small JSON reply once the body is read."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        ticks = re.search(r"ticks=(\d+)", self.path)
        if ticks is None:
            reply = b'{"ok":true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
            return
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for n in range(int(ticks.group(1))):
                line = f"data: {n}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                time.sleep(0.01)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def longest_pause(proxy: NginxProxy, send: Callable[[], object] | None, window: float) -> float:
    """The agent's stream through proxy: the longest pause (ms) while send() runs (or, without
    a send, over `window` seconds)."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "id_slot": 0}).encode()
    agent = [("Authorization", f"Bearer {TEST_AGENT_KEY}")]
    response = open_request(proxy.url, "POST", "/v1/chat/completions?ticks=1000", agent, body)
    arrivals: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set() and response.readline():
            arrivals.append(time.monotonic())
        response.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while len(arrivals) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    if send is None:
        time.sleep(window)
    else:
        send()
    end = time.monotonic()
    stop.set()
    reader.join(10)
    times = [start, *(t for t in arrivals if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(times)) * 1000


def parse_whole(proxy: NginxProxy) -> NginxProxy:
    """The same proxy with every body parsed whole (as before the 1 MB limit), restarted."""
    path = proxy.conf_dir / "njs" / "body.js"
    text, count = re.subn(r"var WHOLE = [^;]+;", "var WHOLE = 1 << 30;", path.read_text())
    assert count == 1, "body.js has no WHOLE limit to raise"
    path.write_text(text)
    return proxy.restart()


def run_stall(logs: Path, rounds: int) -> dict[str, Any]:
    upstream = ThreadingHTTPServer(("127.0.0.1", free_port()), _Ticker)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{upstream.server_address[1]}"
    bodies = {name: make() for name, make in STALL_BODIES.items()}
    proxies: list[NginxProxy] = []
    out: dict[str, Any] = {}
    try:
        for build in BUILDS:
            ours = start_proxy(url, PROXY_KEY, "k", log_dir=logs, build=build)
            old = parse_whole(start_proxy(url, PROXY_KEY, "k", log_dir=logs, build=build))
            proxies += [ours, old]
            out[build.name] = stall_of({"ours": ours, "parse_whole": old}, bodies, rounds)
    finally:
        for proxy in proxies:
            proxy.stop()
        upstream.shutdown()
    return out


def timed_post(url: str, body: bytes, out: list[tuple[int, float]]) -> None:
    began = time.monotonic()
    reply = call(url, "POST", "/v1/chat/completions", GENERAL, raw_body=body)
    out.append((reply.status, (time.monotonic() - began) * 1000))


def stall_of(
    variants: dict[str, NginxProxy], bodies: dict[str, bytes], rounds: int
) -> dict[str, Any]:
    pauses: dict[str, list[float]] = {}
    sent: dict[str, list[tuple[int, float]]] = {}
    for _ in range(rounds):  # interleaved: every variant and body once per round
        for (name, proxy), (kind, body) in itertools.product(variants.items(), bodies.items()):
            key = f"{kind}/{name}"
            answers = sent.setdefault(key, [])
            send = functools.partial(timed_post, proxy.url, body, answers)
            pauses.setdefault(key, []).append(longest_pause(proxy, send, 0))
            quiet = longest_pause(proxy, None, answers[-1][1] / 1000)
            pauses.setdefault(f"no_body/{name}", []).append(quiet)
    result: dict[str, Any] = {key: {"longest_pause": summary(v)} for key, v in pauses.items()}
    for key, answers in sent.items():
        result[key]["answer"] = summary([ms for _, ms in answers])
        result[key]["status"] = sorted({status for status, _ in answers})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="timed requests per variant")
    parser.add_argument("--stall-rounds", type=int, default=5, help="rounds of the stall workload")
    parser.add_argument("--stall-only", action="store_true", help="run only the stall workload")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    stall = run_stall(logs, args.stall_rounds)
    if args.stall_only:
        print(json.dumps({"benchmark": "proxy_bench", "stall": stall}, indent=2))
        return
    llama = start_llama("tiny-text", ctx_per_slot=1024, log_dir=logs)
    key = str(llama.api_key)
    proxies: list[NginxProxy] = []
    try:
        variants = [Variant("direct", Client(llama.url, key), pinned=False)]
        for build in BUILDS:
            plain = start_proxy(llama.url, PROXY_KEY, key, log_dir=logs, build=build,
                                slot_routing=False)  # fmt: skip
            routing = start_proxy(llama.url, PROXY_KEY, key, log_dir=logs, build=build)
            proxies += [plain, routing]
            variants += [
                Variant(f"{build.name}/plain", Client(plain.url, PROXY_KEY), pinned=False),
                Variant(f"{build.name}/routed", Client(routing.url, PROXY_KEY), pinned=False),
                Variant(f"{build.name}/agent", Client(routing.url, TEST_AGENT_KEY), pinned=True),
            ]
        results = {
            name: run_workload(variants, path, make(), args.requests)
            for name, (path, make) in WORKLOADS.items()
        }
    finally:
        for proxy in proxies:
            proxy.stop()
        llama.stop()
    print(
        json.dumps(
            {
                "benchmark": "proxy_bench",
                "anchor": "direct (llama-server without the proxy)",
                "requests_per_variant": args.requests,
                "upstream": "llama-server b11669, tiny-text.gguf, -np 4, 1 generated token",
                "proxies": {build.name: str(build.binary) for build in BUILDS},
                "goal": "added median < 1 ms",
                "workloads": results,
                "ratios": {name: ratios(workload) for name, workload in results.items()},
                "stall": stall,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
