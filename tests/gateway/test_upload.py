"""upload.py: the multipart body that grows with the audio, finished or copied early."""

from __future__ import annotations

import email.parser
import email.policy
import io
import wave

from voice_stack_gateway.audio import PcmFormat
from voice_stack_gateway.stt.upload import WavUpload


def parts(body: bytes, content_type: str) -> dict[str, bytes]:
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    out: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        assert isinstance(name, str)
        assert isinstance(payload, bytes)
        out[name] = payload
    return out


def frames(wav_bytes: bytes) -> bytes:
    with wave.open(io.BytesIO(wav_bytes)) as wav:
        assert (wav.getframerate(), wav.getsampwidth(), wav.getnchannels()) == (16000, 2, 1)
        return bytes(wav.readframes(wav.getnframes()))


def test_snapshot_then_finish() -> None:
    upload = WavUpload(PcmFormat(16000, 2, 1))
    upload.append(b"\x01\x00" * 100)
    early = parts(upload.snapshot({"model": "m"}), upload.content_type)
    upload.append(b"\x02\x00" * 50)  # the upload goes on after a snapshot
    assert upload.audio_bytes == 300
    final = parts(bytes(upload.finish({"model": "m", "language": "en"})), upload.content_type)
    assert frames(early["file"]) == b"\x01\x00" * 100
    assert early["model"] == b"m"
    assert frames(final["file"]) == b"\x01\x00" * 100 + b"\x02\x00" * 50
    assert final["language"] == b"en"


def test_clear_keeps_the_header_room() -> None:
    upload = WavUpload(PcmFormat(16000, 2, 1))
    upload.append(b"\x01\x00" * 10)
    upload.clear()
    assert upload.audio_bytes == 0
    assert frames(parts(bytes(upload.finish({})), upload.content_type)["file"]) == b""
