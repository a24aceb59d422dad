"""Browser-like chat clients that load llama-server's slots, as Open WebUI users do.

Each client has its own long prompt (a document about its topic) and asks a new question every
turn; after each chat turn it sends the short title-generation request Open WebUI sends (a
prompt with a new prefix). Through the auth proxy with the general key they land on the
non-reserved slots; seven distinct prompts a round on four slots keep llama-server's LRU choice
moving them around. Shared by bench/slots_bench.py and bench/voice_e2e.py.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

TOPICS = ("gardening", "cooking", "astronomy")
PARAGRAPHS = 54  # ~1,500 prompt tokens with SmolLM2's tokenizer


def browser_messages(client: int, turn: int, paragraphs: int = PARAGRAPHS) -> list[dict[str, str]]:
    """A browser chat with its own long prompt and a new question each turn."""
    topic = TOPICS[client % len(TOPICS)]
    para = (
        f"Document {client} about {topic}. This paragraph explains {topic} in detail, with "
        f"examples, history and practical advice number {{n}} for curious readers. "
    )
    text = "".join(para.format(n=n) for n in range(paragraphs))
    return [
        {"role": "system", "content": f"You are a helpful assistant for {topic}.\n{text}"},
        {"role": "user", "content": f"Question {turn}: summarise point {turn} about {topic}."},
    ]


def title_task(client: int, turn: int, words: int = 60) -> list[dict[str, str]]:
    """Open WebUI's background task after each chat turn: a short prompt with a new prefix."""
    history = " ".join(f"word{client}-{turn}-{n}" for n in range(words))
    return [
        {
            "role": "user",
            "content": f"Chat {client}.{turn}: {history}\n### Task:\nGenerate a concise, 3-5 "
            "word title with an emoji summarizing the chat history above.",
        }
    ]


@dataclass
class Result:
    """One streamed request."""

    ttft_ms: float
    cache_n: int
    prompt_n: int
    slot: int | None = None  # the proxy's X-Llm-Slot (None straight to llama-server)

    @property
    def reuse(self) -> float:
        total = self.cache_n + self.prompt_n
        return 100.0 * self.cache_n / total if total else 0.0


def stream(
    url: str,
    headers: dict[str, str],
    body: dict[str, Any],
    *,
    max_tokens: int = 4,
    timeout: float = 600.0,
) -> Result:
    """POST a streaming chat request; time to the first streamed token; final timings."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    payload = json.dumps({**body, "stream": True, "max_tokens": max_tokens, "temperature": 0})
    started = time.monotonic()
    try:
        conn.request(
            "POST", "/v1/chat/completions", payload, {**headers, "Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
        slot_header = resp.getheader("X-Llm-Slot") or ""
        ttft: float | None = None
        timings: dict[str, Any] = {}
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if ttft is None and (delta.get("content") or choice.get("finish_reason")):
                    ttft = (time.monotonic() - started) * 1000
            timings = event.get("timings") or timings
    finally:
        conn.close()
    slot = int(slot_header) if slot_header.isdigit() else None
    return Result(
        ttft or 0.0, int(timings.get("cache_n", 0)), int(timings.get("prompt_n", 0)), slot
    )


def browser_round(
    url: str,
    headers: dict[str, str],
    turn: int,
    *,
    clients: int = len(TOPICS),
    paragraphs: int = PARAGRAPHS,
    title_words: int = 60,
    timeout: float = 600.0,
) -> list[Result]:
    """Every client's chat turn, each followed by its title request; the chats' results."""
    chats = []
    for client in range(clients):
        messages = browser_messages(client, turn, paragraphs)
        chats.append(stream(url, headers, {"messages": messages}, timeout=timeout))
        title = title_task(client, turn, title_words)
        stream(url, headers, {"messages": title}, timeout=timeout)
    return chats
