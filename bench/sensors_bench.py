"""Cost of the integration's health and speed polling on the voice path. Prints JSON.

    PYTHONPATH=dev .cache/venv/ha/bin/python bench/sensors_bench.py [--rounds 3 --requests 5]

A real llama-server (SmolLM2-135M, CPU) behind the real nginx auth proxy answers short voice-like
requests pinned to slot 0, interleaved across three variants in each round:

- "anchor": nobody polls the server;
- "ours": the LLM coordinator's request pattern (/health, then /slots and /metrics with the key),
  sped up from every 15 s to every --period s to magnify any cost;
- "prometheus_1s": a plain /metrics scrape every second, a common monitoring setup, for scale.

Reported per variant: median and best request latency, median and best generation tokens/s
(llama-server's own timings), and the medians' ratio to the anchor (on a shared 2-core machine the
best figures are the less noisy ones). Also the median wall time of one full poll ("poll_ms").
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from voice_stack_dev.llama import start_llama
from voice_stack_dev.nginx import TEST_AGENT_KEY, start_proxy

PROXY_KEY = "bench-sensors-key_0123456789"
UPSTREAM_KEY = "bench-upstream-key"


class Client:
    """One keep-alive HTTP/1.1 connection to the proxy, with the agent key (as HA holds it)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80

    def get(self, path: str, auth: bool = True) -> int:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            headers = {"Authorization": f"Bearer {TEST_AGENT_KEY}"} if auth else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def chat(self, text: str) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        body = {
            "messages": [
                {"role": "system", "content": "You are a voice assistant. Answer briefly."},
                {"role": "user", "content": text},
            ],
            "id_slot": 0,
            "max_tokens": 32,
            "temperature": 0,
        }
        try:
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps(body),
                headers={
                    "Authorization": f"Bearer {TEST_AGENT_KEY}",
                    "Content-Type": "application/json",
                },
            )
            resp = conn.getresponse()
            return dict(json.loads(resp.read()))
        finally:
            conn.close()


def ours_poll(client: Client) -> None:
    """What LlamaCoordinator sends per poll (props is read once, so it is left out)."""
    client.get("/health", auth=False)
    client.get("/slots")
    client.get("/metrics")


def prometheus_poll(client: Client) -> None:
    client.get("/metrics")


class Poller:
    """Runs one poll function every `period` seconds on a thread until stopped."""

    def __init__(self, poll: Callable[[], None], period: float) -> None:
        self.poll, self.period = poll, period
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop_event.is_set():
            self.poll()
            self.stop_event.wait(self.period)

    def __enter__(self) -> Poller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join()


def run_requests(client: Client, count: int) -> tuple[list[float], list[float]]:
    latencies, speeds = [], []
    for n in range(count):
        started = time.perf_counter()
        reply = client.chat(f"What is {n} plus {n}?")
        latencies.append((time.perf_counter() - started) * 1000)
        speeds.append(float(reply["timings"]["predicted_per_second"]))
    return latencies, speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--period", type=float, default=0.5, help="poll period for 'ours' (s)")
    args = parser.parse_args()

    log_dir = Path(tempfile.mkdtemp(prefix="sensors-bench-"))
    llama = start_llama("smollm2", api_key=UPSTREAM_KEY, ctx_per_slot=4096, log_dir=log_dir)
    proxy = start_proxy(llama.url, PROXY_KEY, UPSTREAM_KEY, log_dir=log_dir)
    try:
        client = Client(proxy.url)
        run_requests(client, 2)  # warm up: load pages, fill the slot cache
        variants: dict[str, Callable[[], Any]] = {
            "anchor": lambda: None,
            "ours": lambda: Poller(lambda: ours_poll(client), args.period),
            "prometheus_1s": lambda: Poller(lambda: prometheus_poll(client), 1.0),
        }
        latency: dict[str, list[float]] = {name: [] for name in variants}
        speed: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, make in variants.items():
                poller = make()
                if poller is None:
                    lat, spd = run_requests(client, args.requests)
                else:
                    with poller:
                        lat, spd = run_requests(client, args.requests)
                latency[name] += lat
                speed[name] += spd
        poll_ms = []
        for _ in range(20):
            started = time.perf_counter()
            ours_poll(client)
            poll_ms.append((time.perf_counter() - started) * 1000)
    finally:
        proxy.stop()
        llama.stop()

    anchor_latency = statistics.median(latency["anchor"])
    anchor_speed = statistics.median(speed["anchor"])
    result = {
        "model": "SmolLM2-135M-Instruct Q4_1, llama-server b11669 CPU -t 1, behind nginx",
        "requests_per_variant": args.rounds * args.requests,
        "ours_poll_period_s": args.period,
        "poll_ms_median": round(statistics.median(poll_ms), 2),
        "variants": {
            name: {
                "latency_ms_median": round(statistics.median(latency[name]), 1),
                "latency_ms_min": round(min(latency[name]), 1),
                "tokens_per_s_median": round(statistics.median(speed[name]), 1),
                "tokens_per_s_max": round(max(speed[name]), 1),
                "latency_vs_anchor": round(statistics.median(latency[name]) / anchor_latency, 3),
                "speed_vs_anchor": round(statistics.median(speed[name]) / anchor_speed, 3),
            }
            for name in variants
        },
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
