"""What the proxy tests send and how they read what llama-server did with it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxProxy
from voice_stack_dev.rawhttp import Reply, call

CHAT = "/v1/chat/completions"
Headers = Sequence[tuple[str, str]]


def chat(
    first_user: str, *, system: str | None = "You are a helpful assistant.", **extra: Any
) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": first_user})
    return {"messages": messages, "max_tokens": 2, **extra}


def general(proxy: NginxProxy) -> list[tuple[str, str]]:
    return list(proxy.headers.items())


def agent(proxy: NginxProxy) -> list[tuple[str, str]]:
    return list(proxy.agent_headers.items())


def metric(llama: LlamaServer, name: str) -> float:
    text = call(llama.url, "GET", "/metrics", list(llama.headers.items())).body.decode()
    match = re.search(rf"^llamacpp:{name} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} missing from /metrics"
    return float(match.group(1))


def slot_tasks(llama: LlamaServer) -> dict[int, Any]:
    """Each slot's newest task id (None: never used), from llama-server's own /slots."""
    slots = call(llama.url, "GET", "/slots", list(llama.headers.items())).json()
    return {int(slot["id"]): slot.get("id_task") for slot in slots}


def slots_used(llama: LlamaServer, before: dict[int, Any]) -> set[int]:
    """The slots that ran a task since the snapshot ``before``."""
    return {slot for slot, task in slot_tasks(llama).items() if task != before[slot]}


def last_slot(llama: LlamaServer) -> int:
    """The slot that ran the newest task (requests in these tests run one at a time)."""
    used = {slot: task for slot, task in slot_tasks(llama).items() if task is not None}
    return max(used, key=lambda slot: used[slot])


def slot_of(
    proxy: NginxProxy, llama: LlamaServer, path: str, payload: dict[str, Any], headers: Headers
) -> int:
    reply = call(proxy.url, "POST", path, headers, payload)
    assert reply.status == 200, reply.body
    return last_slot(llama)


def raw_post(proxy: NginxProxy, path: str, headers: Headers, body: str | bytes) -> Reply:
    data = body.encode() if isinstance(body, str) else body
    return call(proxy.url, "POST", path, headers, raw_body=data)


def request_lines(proxy: NginxProxy, method: str, path: str, at_least: int = 0) -> list[str]:
    """The access-log lines of `method path` requests, once there are at least `at_least`.

    nginx writes a request's line just after its reply, and other requests (the harness's
    readiness probe, say) may be logged in between, so lines are matched by request, not
    counted by position.
    """
    marker = f'"{method} {path}" '
    deadline = time.monotonic() + 10.0
    while True:
        lines = [ln for ln in proxy.access_log.read_text().splitlines() if marker in ln]
        if len(lines) >= at_least or time.monotonic() > deadline:
            return lines
        time.sleep(0.01)


def routed_slot(
    proxy: NginxProxy, llama: LlamaServer, path: str, body: str, headers: Headers
) -> int:
    """Send a raw body; return the slot it ran on, after checking the proxy named that slot."""
    reply = raw_post(proxy, path, headers, body)
    assert reply.status == 200, reply.body
    slot = last_slot(llama)
    assert reply.headers["x-llm-slot"] == str(slot)
    return slot


def refusal(reply: Reply, status: int) -> str:
    """The message of the proxy's own JSON error (checked to be one, with that status)."""
    assert reply.status == status, reply.body
    error = json.loads(reply.body)["error"]
    assert error["code"] == status
    return str(error["message"])
