"""Added latency of the llm-auth proxy: llama-server direct vs through nginx, with and without the
njs slot routing, in one interleaved run. Prints JSON.

    PYTHONPATH=dev .cache/venv/ha/bin/python bench/proxy_bench.py [--requests 300]

Every variant sends the same requests to the same llama-server (tiny deterministic model, one
generated token), so the difference is the proxy's cost: nginx's bearer check (njs SHA-256), a
fresh upstream connection, and for "routing" the njs body parse + slot hash + body rewrite.
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
from pathlib import Path
from typing import Any

from voice_stack_dev.llama import start_llama
from voice_stack_dev.nginx import start_proxy

PROXY_KEY = "bench-proxy-key_0123456789"
VARIANTS = ("direct", "proxy_plain", "proxy_routing")


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


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
    }


def run_workload(
    clients: dict[str, Client], path: str, body: bytes, requests: int
) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(10):  # warm the prompt cache and the connections
        for name in VARIANTS:
            clients[name].post(path, body)
    for i in range(requests):
        order = VARIANTS[i % 3 :] + VARIANTS[: i % 3]  # rotate, so no variant always goes first
        for name in order:
            times[name].append(clients[name].post(path, body))
    result: dict[str, Any] = {name: summary(times[name]) for name in VARIANTS}
    direct = result["direct"]["median_ms"]
    for name in ("proxy_plain", "proxy_routing"):
        paired = [p - d for p, d in zip(times[name], times["direct"], strict=True)]
        result[name]["added_median_ms"] = round(result[name]["median_ms"] - direct, 3)
        result[name]["added_paired_median_ms"] = round(statistics.median(paired), 3)
    result["njs_routing_cost_median_ms"] = round(
        result["proxy_routing"]["median_ms"] - result["proxy_plain"]["median_ms"], 3
    )
    result["path"] = path
    result["request_bytes"] = len(body)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="timed requests per variant")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    llama = start_llama("tiny-text", ctx_per_slot=1024, log_dir=logs)
    key = str(llama.api_key)
    routing = start_proxy(llama.url, PROXY_KEY, key, log_dir=logs)
    plain = start_proxy(llama.url, PROXY_KEY, key, log_dir=logs, slot_routing=False)
    try:
        clients = {
            "direct": Client(llama.url, key),
            "proxy_plain": Client(plain.url, PROXY_KEY),
            "proxy_routing": Client(routing.url, PROXY_KEY),
        }
        results = {
            name: run_workload(clients, path, json.dumps(make()).encode(), args.requests)
            for name, (path, make) in WORKLOADS.items()
        }
    finally:
        routing.stop()
        plain.stop()
        llama.stop()
    print(
        json.dumps(
            {
                "benchmark": "proxy_bench",
                "anchor": "direct (llama-server without the proxy)",
                "requests_per_variant": args.requests,
                "upstream": "llama-server b11669, tiny-text.gguf, -np 4, 1 generated token",
                "proxy": "Debian nginx 1.22 + njs 0.7.9, compose template",
                "goal": "added median < 1 ms",
                "workloads": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
