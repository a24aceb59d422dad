"""The fuzzer's cases: what a hostile or broken LAN client sends a Wyoming server. Each case is a
name, a group and what it sends; cases are generated from a seed, so a run can be repeated."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event
from wyoming.info import Describe
from wyoming.ping import Ping
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

MIB = 1024 * 1024


def wire(event: Event) -> bytes:
    """An event's bytes as wyoming's writer lays them out."""
    header: dict[str, object] = {"type": event.type, "version": "1.10.2"}
    data = json.dumps(event.data).encode() if event.data else b""
    if data:
        header["data_length"] = len(data)
    if event.payload:
        header["payload_length"] = len(event.payload)
    return json.dumps(header).encode() + b"\n" + data + (event.payload or b"")


def raw_event(header: dict[str, object], data: bytes = b"", payload: bytes = b"") -> bytes:
    """An event with lengths the caller chose (they may lie)."""
    return json.dumps(header).encode() + b"\n" + data + payload


def chunk(rate: int = 16000, width: int = 2, channels: int = 1, seconds: float = 0.1) -> Event:
    frames = int(rate * seconds)
    return AudioChunk(rate, width, channels, bytes(frames * width * channels)).event()


@dataclass(frozen=True)
class Case:
    """One bad client: `sends` goes out (with `pause` seconds between the pieces); `connections`
    clients do the same at once; `reads` False: it never reads what it is sent."""

    name: str
    group: str
    sends: tuple[bytes, ...] = ()
    pause: float = 0.0
    connections: int = 1
    reads: bool = True
    http: bool = False
    hold: float = 0.0  # seconds it stays connected after sending (0: until the gateway closes)
    tags: frozenset[str] = field(default_factory=frozenset)


_VALID = [
    Event(type="transcribe", data={"language": "en"}),
    AudioStart(16000, 2, 1).event(),
    chunk(),
    AudioStop().event(),
    Synthesize(text="Hello there.").event(),
    SynthesizeStart().event(),
    SynthesizeChunk(text="Part of a sentence ").event(),
    SynthesizeStop().event(),
    Describe().event(),
    Ping(text="x").event(),
    Event(type="select-program", data={"name": "nope"}),
    Event(type="transcript", data={"text": "a server event"}),
    Event(type="info", data={}),
    Event(type="error", data={"text": "client error"}),
    Event(type="run-pipeline", data={"start_stage": "asr"}),
]


def out_of_order(rng: random.Random, n: int) -> Iterator[Case]:
    """Every event type in random order, repeats allowed."""
    for i in range(n):
        events = [rng.choice(_VALID) for _ in range(rng.randint(2, 9))]
        yield Case(f"order-{i}", "order", (b"".join(wire(e) for e in events),))


def bad_fields() -> Iterator[Case]:
    events = [
        Event(type="audio-start", data={}),
        Event(type="audio-start", data={"rate": "16000", "width": 2, "channels": 1}),
        Event(type="audio-start", data={"rate": -1, "width": 2, "channels": 1}),
        Event(type="audio-start", data={"rate": 10**12, "width": 2, "channels": 1}),
        Event(type="audio-start", data={"rate": 16000, "width": 3, "channels": 1}),
        Event(type="audio-start", data={"rate": 16000, "width": 2, "channels": 0}),
        Event(type="audio-start", data={"rate": 16000, "width": 2, "channels": 10**6}),
        Event(type="audio-start", data={"rate": 16000.5, "width": True, "channels": None}),
        Event(type="synthesize", data={}),
        Event(type="synthesize", data={"text": None}),
        Event(type="synthesize", data={"text": ["a", "list"]}),
        Event(type="synthesize", data={"text": {"a": "dict"}}),
        Event(type="synthesize", data={"text": "hi", "voice": "a string"}),
        Event(type="synthesize", data={"text": "hi", "voice": {"name": ["x"]}}),
        Event(type="synthesize", data={"text": "hi", "voice": {"name": "no-such-voice"}}),
        Event(type="synthesize", data={"text": "  "}),
        Event(type="synthesize-start", data={"voice": 5}),
        Event(type="synthesize-chunk", data={"text": 5}),
        Event(type="transcribe", data={"name": 5, "language": ["en"]}),
        Event(type="select-program", data={"name": {"x": 1}}),
        Event(type="ping", data={"text": 10**400}),
        Event(type="describe", data={"extra": "field", "more": [1, 2, 3]}),
        Event(type="", data={}),
    ]
    for i, event in enumerate(events):
        yield Case(f"fields-{i}-{event.type or 'empty'}", "fields", (wire(event),))
    for i, header in enumerate([[1], "str", 5, None, {"type": ["x"]}, {"type": "x", "data": 5}]):
        yield Case(f"fields-header-{i}", "fields", (json.dumps(header).encode() + b"\n",))


def huge() -> Iterator[Case]:
    big_text = Event(type="synthesize", data={"text": "a" * (MIB - 32)})
    nested = b"[" * 200_000 + b"]" * 200_000
    yield Case("huge-data-1mib", "huge", (wire(big_text),))
    yield Case("huge-data-over", "huge", (raw_event({"type": "x", "data_length": MIB + 1}),))
    yield Case(
        "huge-payload-over", "huge", (raw_event({"type": "x", "payload_length": 4 * MIB + 1}),)
    )
    yield Case("huge-header", "huge", (b'{"type": "' + b"a" * 70_000 + b'"}\n',))
    nested_data = b'{"x": ' + nested + b"}"
    yield Case(
        "huge-nested-data",
        "huge",
        (raw_event({"type": "x", "data_length": len(nested_data)}) + nested_data,),
    )
    yield Case(
        "huge-nested-header", "huge", (b'{"type": "x", "data": ' + nested[:60_000] + b"}\n",)
    )
    yield Case("huge-payload-4mib", "huge", (wire(Event(type="x", payload=bytes(4 * MIB))),))


def encoding() -> Iterator[Case]:
    sends = {
        "enc-header-not-utf8": b'{"type": "ping\xff\xfe"}\n',
        "enc-data-not-utf8": raw_event({"type": "ping", "data_length": 14}, b'{"text": "\xc3("}'),
        "enc-lone-surrogate": b'{"type": "synthesize", "data": {"text": "\\ud800"}}\n',
        "enc-surrogate-in-data": raw_event(
            {"type": "ping", "data_length": 18}, b'{"text": "\\udfff"}'
        ),
        "enc-nul-bytes": b'{"type": "ping\x00", "data": {"text": "\x00"}}\n',
        "enc-bom": b'\xef\xbb\xbf{"type": "describe"}\n',
        "enc-not-json": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "enc-binary": bytes(range(256)) * 4 + b"\n",
    }
    for name, data in sends.items():
        yield Case(name, "encoding", (data,))


def lengths() -> Iterator[Case]:
    yield Case(
        "len-payload-short-then-eof",
        "lengths",
        (raw_event({"type": "audio-chunk", "payload_length": 1000}, payload=b"x" * 10),),
    )
    yield Case(
        "len-payload-long",
        "lengths",
        (raw_event({"type": "ping", "payload_length": 2}, payload=b"abcdef\n"),),
    )
    yield Case(
        "len-data-short",
        "lengths",
        (raw_event({"type": "ping", "data_length": 4}, b'{"text": "x"}'),),
    )
    yield Case("len-negative", "lengths", (raw_event({"type": "ping", "data_length": -5}),))
    yield Case("len-string", "lengths", (raw_event({"type": "ping", "payload_length": "9"}),))
    yield Case("len-float", "lengths", (raw_event({"type": "ping", "payload_length": 1.5}),))
    yield Case(
        "len-body-never-comes",
        "lengths",
        (raw_event({"type": "ping", "payload_length": 100}),),
        hold=3.0,
    )


def audio() -> Iterator[Case]:
    start = wire(AudioStart(16000, 2, 1).event())
    stop = wire(AudioStop().event())
    odd = wire(AudioChunk(16000, 2, 1, b"\x01" * 3201).event())
    formats = [(16000, 2, 1), (8000, 1, 1), (48000, 4, 2), (22050, 2, 2), (11025, 1, 2)]
    changing = b"".join(wire(chunk(rate, width, ch)) for rate, width, ch in formats)
    yield Case("audio-odd-length", "audio", (start + odd + stop,))
    yield Case("audio-changing-format", "audio", (start + changing + stop,))
    yield Case("audio-chunk-first", "audio", (wire(chunk()) + stop,))
    yield Case("audio-stop-first", "audio", (stop,))
    yield Case(
        "audio-rate-1",
        "audio",
        (wire(AudioStart(1, 2, 1).event()) + wire(chunk(1, 2, 1, 100)) + stop,),
    )
    yield Case(
        "audio-48k-stereo-32bit-4mib",
        "audio",
        (
            wire(AudioStart(48000, 4, 2).event())
            + wire(AudioChunk(48000, 4, 2, bytes(4 * MIB - 8)).event())
            + stop,
        ),
    )
    too_long = wire(AudioChunk(16000, 2, 1, bytes(32000 * 10)).event())
    yield Case("audio-too-long", "audio", (start + too_long * 7 + stop,))
    yield Case("audio-never-stops", "audio", (start + wire(chunk()),), hold=4.0)


def text() -> Iterator[Case]:
    start = wire(SynthesizeStart().event())
    stop = wire(SynthesizeStop().event())
    no_end = wire(SynthesizeChunk(text="e.g. " * 200_000).event())
    yield Case("text-no-end-1mib", "text", (start + no_end + stop,))
    yield Case(
        "text-no-end-chunks",
        "text",
        (start + wire(SynthesizeChunk(text="e.g. " * 8_000).event()) * 10 + stop,),
    )
    yield Case("text-plain-over-limit", "text", (wire(Synthesize(text="word " * 10_001).event()),))
    yield Case(
        "text-stream-never-stops",
        "text",
        (start + wire(SynthesizeChunk(text="Waiting").event()),),
        hold=4.0,
    )


def slow_and_silent(idle: float) -> Iterator[Case]:
    header = wire(Describe().event())
    yield Case("slow-byte-at-a-time", "slow", tuple(bytes([b]) for b in header), pause=idle / 4)
    yield Case("silent", "silent", (), connections=1)
    yield Case("silent-many", "silent", (), connections=40)  # past the per-host limit
    yield Case(
        "no-read-long-reply",
        "noread",
        (wire(Synthesize(text="word " * 4000).event()),),
        reads=False,
    )


def many(rng: random.Random) -> Iterator[Case]:
    flood = b"".join(wire(Event(type="synthesize", data={"text": 5})) for _ in range(200))
    yield Case("flood-bad-events", "flood", (flood,), connections=20)
    mixed = tuple(b"".join(wire(rng.choice(_VALID)) for _ in range(5)) for _ in range(3))
    yield Case("many-at-once", "many", mixed, connections=50)


def http(idle: float) -> Iterator[Case]:
    def req(text: str) -> bytes:
        return text.replace("\n", "\r\n").encode()

    sends = {
        "http-garbage": b"\x00\x01\x02 not http at all\r\n\r\n",
        "http-huge-line": b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
        "http-many-headers": b"GET /health HTTP/1.1\r\n" + b"X-A: b\r\n" * 1000 + b"\r\n",
        "http-huge-header": b"GET /health HTTP/1.1\r\nX-A: " + b"b" * 100_000 + b"\r\n\r\n",
        "http-post-body": req("POST /health HTTP/1.1\nContent-Length: 5000000\n\n")
        + b"x" * 100_000,
        "http-traversal": req("GET /../../etc/passwd HTTP/1.1\nHost: x\n\n"),
        "http-unknown-path": req("GET /admin HTTP/1.1\nHost: x\n\n"),
        "http-0.9": b"GET /health\r\n",
        "http-bad-version": req("GET /health HTTP/9.9\n\n"),
        "http-connect": req("CONNECT 127.0.0.1:22 HTTP/1.1\n\n"),
        "http-pipelined": req("GET /metrics HTTP/1.1\nHost: x\n\n") * 100,
        "http-chunked-lie": req("POST /metrics HTTP/1.1\nTransfer-Encoding: chunked\n\nzzz\n"),
    }
    for name, data in sends.items():
        yield Case(name, "http", (data,), http=True)
    line = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    yield Case("http-slowloris", "http", tuple(bytes([b]) for b in line), pause=idle / 4, http=True)
    yield Case("http-silent-many", "http", (), connections=40, http=True, hold=idle + 1)


def all_cases(seed: int, idle: float, orders: int = 24) -> list[Case]:
    rng = random.Random(seed)
    return [
        *out_of_order(rng, orders), *bad_fields(), *huge(), *encoding(), *lengths(), *audio(),
        *text(), *slow_and_silent(idle), *many(rng), *http(idle),
    ]  # fmt: skip
