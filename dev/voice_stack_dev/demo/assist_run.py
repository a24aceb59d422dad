"""One spoken request through HA's Assist pipeline, as a voice satellite or the browser mic does.

`assist_pipeline/run` from the stt stage to the tts stage; the audio goes in as binary websocket
frames (the handler id byte, then 16-bit mono PCM); an empty frame ends it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import DemoError
from .ha_client import HomeAssistantClient, Json

CHUNK_BYTES = 3200  # 100 ms at 16 kHz
RUN_TIMEOUT = 180.0
STAGES = ("stt", "intent", "tts")


@dataclass
class RunResult:
    """What the pipeline said, with its own event timestamps turned into stage latencies."""

    transcript: str = ""
    reply: str = ""
    reply_type: str = ""
    conversation_id: str | None = None
    processed_locally: bool | None = None
    tts_url: str | None = None
    tts_mime: str | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    wall_ms: float = 0.0


def _ts(event: Json) -> datetime | None:
    raw = event.get("timestamp")
    return datetime.fromisoformat(raw) if isinstance(raw, str) else None


async def run_pipeline(
    ha: HomeAssistantClient, pipeline_id: str, pcm16k: bytes, log_path: str
) -> RunResult:
    """Stream the audio in and collect run-start ... run-end."""
    result = RunResult()
    starts: dict[str, datetime] = {}
    began = time.monotonic()
    async with ha.ws_subscription(
        "assist_pipeline/run",
        start_stage="stt",
        end_stage="tts",
        pipeline=pipeline_id,
        input={"sample_rate": 16000},
        timeout=RUN_TIMEOUT,
    ) as (_msg_id, queue):
        ack = await ha.next_message(queue, "assist_pipeline/run", 30)
        if not ack.get("success", True):
            error = ack.get("error", {})
            raise DemoError("Assist pipeline", f"{error.get('code')}: {error.get('message')}")
        while True:
            msg = await ha.next_message(queue, "assist_pipeline/run", RUN_TIMEOUT)
            if msg.get("type") != "event":
                continue
            event = msg["event"]
            kind: str = event["type"]
            data: dict[str, Any] = event.get("data") or {}
            result.events.append(kind)
            stage, _, edge = kind.partition("-")
            if edge == "start" and (ts := _ts(event)):
                starts[stage] = ts
            elif edge == "end" and stage in starts and (ts := _ts(event)):
                result.stage_ms[stage] = (ts - starts[stage]).total_seconds() * 1000
            if kind == "run-start":
                handler = data["runner_data"]["stt_binary_handler_id"]
                await _send_audio(ha, handler, pcm16k)
            elif kind == "stt-end":
                result.transcript = data["stt_output"]["text"]
            elif kind == "intent-end":
                _read_intent(result, data)
            elif kind == "tts-end":
                output = data.get("tts_output") or {}
                result.tts_url, result.tts_mime = output.get("url"), output.get("mime_type")
            elif kind == "error":
                raise DemoError(
                    _service_for(data.get("code", "")),
                    f"{data.get('code')}: {data.get('message')}",
                    log_path,
                )
            elif kind == "run-end":
                break
    result.wall_ms = (time.monotonic() - began) * 1000
    return result


async def _send_audio(ha: HomeAssistantClient, handler: int, pcm: bytes) -> None:
    prefix = bytes([handler])
    for offset in range(0, len(pcm), CHUNK_BYTES):
        await ha.send_binary(prefix + pcm[offset : offset + CHUNK_BYTES])
    await ha.send_binary(prefix)  # end of audio


def _read_intent(result: RunResult, data: Json) -> None:
    output = data.get("intent_output") or {}
    response = output.get("response") or {}
    speech = response.get("speech") or {}
    result.reply_type = response.get("response_type", "")
    result.reply = (speech.get("plain") or {}).get("speech", "")
    result.conversation_id = output.get("conversation_id")
    result.processed_locally = data.get("processed_locally")


def _service_for(code: str) -> str:
    """Name the part behind a pipeline error code (stt-*, intent-*, tts-*)."""
    if code.startswith("stt"):
        return "speech-to-text (gateway -> speech server)"
    if code.startswith("tts"):
        return "text-to-speech (gateway -> speech server)"
    if code.startswith(("intent", "conversation")):
        return "conversation agent (voice_stack -> proxy -> llama-server)"
    return "Assist pipeline"
