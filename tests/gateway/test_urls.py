"""urls.py: backend URLs shown without credentials."""

from __future__ import annotations

from voice_stack_gateway.urls import public_url, redact_urls


def test_public_url_drops_credentials() -> None:
    assert public_url("http://user:pw@gpu-box:8000/v1?key=abc#x") == "http://gpu-box:8000/v1"
    assert public_url("https://tok@[fd00::1]/v1") == "https://[fd00::1]/v1"
    assert public_url("http://asr:8000/v1") == "http://asr:8000/v1"
    assert public_url("http://h:99999/") == "<invalid URL>"


def test_urls_in_text_are_redacted() -> None:
    text = "Cannot GET 'http://u:secret@h/v1/models?api_key=secret2' (see https://x.org/a?b=c)"
    assert redact_urls(text) == "Cannot GET 'http://h/v1/models' (see https://x.org/a)"
