"""The STT upload, built while the audio streams in: a multipart/form-data body whose file part
is a WAV that grows chunk by chunk. At audio-stop only the WAV sizes are patched and the short
text fields appended, so the request leaves at once (no copy of the audio, no form encoder).
An early transcription takes a copy of the audio so far instead, and the upload keeps growing."""

from __future__ import annotations

import secrets

from ..audio import PcmFormat, wav_header

_WAV_HEADER = 44


class WavUpload:
    def __init__(self, fmt: PcmFormat) -> None:
        self.format = fmt
        self.boundary = secrets.token_hex(16)
        self.body = bytearray(
            f"--{self.boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="audio.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n".encode()
        )
        self._header_at = len(self.body)
        self.body += bytes(_WAV_HEADER)  # patched in finish()
        self._audio_at = len(self.body)

    @property
    def audio_bytes(self) -> int:
        return len(self.body) - self._audio_at

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def append(self, pcm: bytes) -> None:
        self.body += pcm

    def clear(self) -> None:
        del self.body[self._audio_at :]

    def release(self) -> None:
        """Drop the body (a request still sending it keeps its own reference)."""
        self.body = bytearray()

    def finish(self, fields: dict[str, str]) -> bytearray:
        """The complete body (the upload is done: nothing may be appended after this)."""
        at = self._header_at
        self.body[at : at + _WAV_HEADER] = wav_header(self.format, self.audio_bytes)
        self.body += self._tail(fields)
        return self.body

    def snapshot(self, fields: dict[str, str]) -> bytes:
        """A complete body of the audio so far; the upload goes on growing."""
        at = self._header_at
        return b"".join(
            (
                self.body[:at],
                wav_header(self.format, self.audio_bytes),
                self.body[self._audio_at :],
                self._tail(fields),
            )
        )

    def _tail(self, fields: dict[str, str]) -> bytes:
        parts = [b"\r\n"]
        for name, value in fields.items():
            parts.append(
                f"--{self.boundary}\r\n"
                f'Content-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
            )
        parts.append(f"--{self.boundary}--\r\n".encode())
        return b"".join(parts)
