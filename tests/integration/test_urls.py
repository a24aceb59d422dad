"""URLs as typed, as shown, as keyed (urls.py)."""

from __future__ import annotations

import pytest

from custom_components.voice_stack.urls import host_of, normalize_url, shown_url


@pytest.mark.parametrize(
    ("typed", "saved"),
    [
        (" HTTP://GPU-Box:11434/ ", "http://gpu-box:11434"),
        ("http://gpu-box:11434/v1", "http://gpu-box:11434"),  # as an OpenAI client takes it
        ("http://gpu-box:11434/v1/", "http://gpu-box:11434"),
        ("http://gpu-box:11434/V1//", "http://gpu-box:11434"),
        ("https://ha-lan/llm/v1", "https://ha-lan/llm"),  # behind a path of a reverse proxy
        ("http://gpu-box:11434/v10", "http://gpu-box:11434/v10"),
        ("http://gpu-box:11434/api/v1x", "http://gpu-box:11434/api/v1x"),
        ("http://Admin:S3cret@GPU-box:11434/v1", "http://Admin:S3cret@gpu-box:11434"),
    ],
)
def test_normalize_url(typed: str, saved: str) -> None:
    assert normalize_url(typed) == saved


def test_shown_and_host() -> None:
    assert shown_url("http://user:pw@gpu-box:11434/x?key=1") == "http://gpu-box:11434/x"
    assert host_of("http://user:pw@[::1]:11434") == "[::1]"
