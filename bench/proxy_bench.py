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
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voice_stack_dev.llama import start_llama
from voice_stack_dev.nginx import BUILDS, TEST_AGENT_KEY, NginxProxy, start_proxy

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="timed requests per variant")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
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
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
