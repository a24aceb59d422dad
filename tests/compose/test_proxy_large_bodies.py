"""Bodies over 1 MB (compose/nginx/njs/body.js): parsed without their long strings, so no body
holds the nginx worker that streams the voice agent's reply for long; everything else as for a
small body: routed or refused, what llama-server receives is what njs read, and a conversation
keeps its slot when its body grows past 1 MB. Every nginx build, against the recording upstream
(the exact bytes forwarded) and the real llama-server (what it ran)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import pytest

from tests.compose.proxy_helpers import CHAT, agent, general, metric, raw_post, refusal, routed_slot
from tests.compose.recording_upstream import RecordingUpstream
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import NginxProxy
from voice_stack_dev.rawhttp import Reply, open_request

pytestmark = pytest.mark.usefixtures("socket_enabled")

FREE = {1, 2, 3}  # -np 4, slot 0 reserved
MB = 1024 * 1024
IMAGE = "iVBORw0KGgo" * (3 * MB // 11)  # ~3 MB of base64, one string


def image_chat(question: str, **extra: Any) -> dict[str, Any]:
    parts = [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + IMAGE}},
    ]
    return {
        "messages": [
            {"role": "system", "content": "You describe pictures."},
            {"role": "user", "content": parts},
        ],
        "max_tokens": 2,
        **extra,
    }


def forwarded(proxy: NginxProxy, recorder: RecordingUpstream, body: bytes, key: str) -> bytes:
    """Send body with a key; the bytes the upstream received (exactly one request)."""
    recorder.take()
    headers = general(proxy) if key == "general" else agent(proxy)
    reply = raw_post(proxy, CHAT, headers, body)
    assert reply.status == 200, reply.body[:300]
    (got,) = recorder.take()
    return got.body


def top_id_slots(body: bytes) -> list[Any]:
    pairs = json.loads(body, object_pairs_hook=lambda items: {"__pairs__": items})["__pairs__"]
    return [value for key, value in pairs if key == "id_slot"]


def test_a_big_body_without_id_slot_gets_one_spliced_in(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream
) -> None:
    sent = json.dumps(image_chat("what is this?")).encode() + b"\n "
    got = forwarded(recorded_proxy, recorder, sent, "general")
    (slot,) = top_id_slots(got)
    assert slot in FREE
    assert got == sent.rstrip()[:-1] + b',"id_slot":%d}' % slot  # every other byte as sent


@pytest.mark.parametrize(
    ("key", "extra", "slot"),
    [
        ("general", ',"id_slot":0', None),  # reserved: replaced, the object re-serialised
        ("general", ',"id\\u005fslot":0', None),
        ("general", ',"id_slot":2', 2),  # a free slot of its own: kept
        ("agent", ',"id_slot":0', 0),  # the agent's: forwarded exactly as sent
    ],
)
def test_a_big_body_with_id_slot_keeps_its_long_strings(
    recorded_proxy: NginxProxy,
    recorder: RecordingUpstream,
    *,
    key: str,
    extra: str,
    slot: int | None,
) -> None:
    # a long string as a key, and escapes in and around the long ones, must come back intact
    payload = image_chat('what is this? \u00e9 "q"', **{"k" * 40_000: "v\\" * 20_000})
    sent = b"\xef\xbb\xbf" + json.dumps(payload).encode()[:-1] + extra.encode() + b"}"
    got = forwarded(recorded_proxy, recorder, sent, key)
    if key == "agent":
        assert got == sent[3:]  # without the byte-order mark
        return
    (routed,) = top_id_slots(got)
    assert routed == slot if slot is not None else routed in FREE
    received = json.loads(got)
    received.pop("id_slot")
    assert received == payload


def test_a_conversation_keeps_its_slot_when_its_body_grows_past_1_mb(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream
) -> None:
    """The routing key of a big body is the one a small body gets: a long system text (set
    aside, with escapes, clock digits and characters of every UTF-8 length) and first turn."""
    system = ("You are a voice assistant. Time 12:04:05.\n\u00e9\u20ac\U0001f600 " * 2000)[:50_000]
    first = {"role": "user", "content": "what is on in the kitchen? \u00e9" * 1500}
    slots = set()
    for n, later in enumerate(("short", "x" * (2 * MB))):
        system_now = system.replace("12:04:05", f"12:{n:02d}:59")
        messages = [{"role": "system", "content": system_now}, first]
        messages += [{"role": "assistant", "content": later}, {"role": "user", "content": "and?"}]
        body = json.dumps({"messages": messages, "max_tokens": 2}).encode()
        assert (len(body) > MB) == bool(n)
        recorder.take()
        reply = raw_post(recorded_proxy, CHAT, general(recorded_proxy), body)
        assert reply.status == 200, reply.body[:300]
        slots.add(reply.headers["x-llm-slot"])
    assert len(slots) == 1


def padded(structure: str, pad: int = 2 * MB) -> bytes:
    """A body over 1 MB: structure, plus a long string that takes no parsing."""
    return ('{"messages":[{"role":"user","content":"hi"}],"pad":"' + "x" * pad + '",'
            + structure + "}").encode()  # fmt: skip


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"x":[' + b"0," * (MB // 2) + b'0],"pad":"' + b"x" * MB + b'"}', 413, "bytes of JSON"),
        (padded('"s":[' + '"a",' * 70_000 + '"a"]'), 413, "65536 strings"),
        (padded('"e":"' + '\\"' * 70_000 + '"'), 413, "backslashes"),
        (padded('"z":"a\\u0000b"'), 400, "\\u0000"),
        (padded('"n":"a\x00b"'), 400, "NUL byte"),
        (padded('"bad" 1'), 400, "not valid JSON"),
        (padded('"x":1}{"id_slot":0'), 400, "not valid JSON"),
        (padded('"open":"never closed'), 400, "not valid JSON"),
        (b"[" + padded('"id_slot":0') + b"]", 400, "one JSON object"),
        (padded('"deep":' + "[" * 200_000 + "]" * 200_000), 400, "nested too deeply"),
    ],
    ids=[
        "structure",
        "strings",
        "escapes",
        "nul-escape",
        "nul",
        "syntax",
        "two",
        "open",
        "array",
        "deep",
    ],
)
def test_a_big_body_that_cannot_be_read_is_refused_and_nothing_is_forwarded(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream, *, body: bytes, status: int, says: str
) -> None:
    assert len(body) > MB
    recorder.take()
    reply = raw_post(recorded_proxy, CHAT, general(recorded_proxy), body)
    assert says in refusal(reply, status)
    assert recorder.take() == []


def test_big_bodies_on_llama_server(llm_proxy: NginxProxy, llama_text: LlamaServer) -> None:
    """What llama-server runs for big bodies (an unused long field keeps its work small)."""
    pad = "y" * (2 * MB)

    def body(**extra: Any) -> str:
        return json.dumps({"prompt": "hi", "n_predict": 2, "pad": pad, **extra})

    assert routed_slot(llm_proxy, llama_text, "/completion", body(), general(llm_proxy)) in FREE
    for named, expect in ((0, None), (2, 2), (-1, None)):
        slot = routed_slot(llm_proxy, llama_text, "/completion", body(id_slot=named),
                           general(llm_proxy))  # fmt: skip
        assert slot == expect if expect is not None else slot in FREE
    assert routed_slot(llm_proxy, llama_text, "/completion", body(id_slot=0), agent(llm_proxy)) == 0
    # a long string the proxy does not parse is llama-server's to refuse: nothing runs
    decodes = metric(llama_text, "n_decode_total")
    broken = body()[:-2] + '\n"}'  # a raw newline inside the long string: not JSON
    reply = raw_post(llm_proxy, "/completion", general(llm_proxy), broken)
    assert reply.status >= 400
    assert metric(llama_text, "n_decode_total") == decodes


# --- the agent's stream while a big body is read ---------------------------------------------

# The longest pause in the agent's stream a big general-key body may cause. The real figures
# (tens of milliseconds here; the old full parse: 1.7-2.7 s for this body on this 2-core box)
# are bench/proxy_bench.py's "stall" workload; this bound only has to tell the two apart.
STALL_BOUND_S = 1.0
SMALL_VALUES = (
    b'{"messages":[{"role":"user","content":"hi"}],"x":['
    + b'{"a":{}},' * (30 * MB // 9)
    + b'{"a":{}}]}'
)
BIG_IMAGE = json.dumps(image_chat("describe", pad="p" * (26 * MB))).encode()


class AgentStream:
    """The agent's streamed reply through the proxy (the ticking upstream: a line every 10 ms),
    read in a thread that notes when each line arrives."""

    def __init__(self, proxy: NginxProxy, lines: int) -> None:
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "id_slot": 0})
        self.response = open_request(
            proxy.url, "POST", f"{CHAT}?ticks={lines}", agent(proxy), body.encode()
        )
        assert self.response.status == 200
        self.arrivals: list[float] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self._stop.is_set() and self.response.readline():
            self.arrivals.append(time.monotonic())
        self.response.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(10)

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time without a line, between start and end."""
        times = [start, *(t for t in self.arrivals if start < t < end), end]
        return max(b - a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("big", [SMALL_VALUES, BIG_IMAGE], ids=["small-values", "image"])
def test_a_big_general_body_does_not_stall_the_agents_stream(
    recorded_proxy: NginxProxy, recorder: RecordingUpstream, big: bytes
) -> None:
    assert len(big) > 25 * MB
    stream = AgentStream(recorded_proxy, 800)  # 8 s of stream
    deadline = time.monotonic() + 10
    while len(stream.arrivals) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)  # the stream is flowing through the proxy
    assert len(stream.arrivals) >= 20
    sent = time.monotonic()
    reply: Reply = raw_post(recorded_proxy, CHAT, general(recorded_proxy), big)
    answered = time.monotonic()
    pause = stream.longest_pause(sent, answered)
    assert pause < STALL_BOUND_S, f"the agent's stream stood still for {pause:.2f} s"
    assert reply.status == (413 if big is SMALL_VALUES else 200), reply.body[:300]
    stream.close()
    recorder.take()
