"""Command line and environment: every flag has an environment variable (wyoming-openai's names
kept where they exist)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from . import __version__


@dataclass(frozen=True, slots=True)
class Flag:
    """One option: its flag, its environment names (first wins) and its default."""

    flag: str
    env: tuple[str, ...]
    default: str
    help: str


# The mapping table in gateway/README.md is generated from this list (see `--print-env-table`).
FLAGS: tuple[Flag, ...] = (
    Flag("--uri", ("GATEWAY_URI", "WYOMING_URI"), "tcp://0.0.0.0:10300", "Wyoming listen URI"),
    Flag(
        "--http-uri",
        ("GATEWAY_HTTP_URI",),
        "tcp://0.0.0.0:10301",
        "health/metrics port; '' disables",
    ),
    Flag(
        "--stt-openai-url", ("STT_OPENAI_URL",), "http://127.0.0.1:8000/v1", "ASR server base URL"
    ),
    Flag("--stt-openai-key", ("STT_OPENAI_KEY",), "", "ASR bearer key (never logged)"),
    Flag(
        "--stt-models",
        ("STT_MODELS",),
        "",
        "ASR models, first is the default (space or comma list)",
    ),
    Flag(
        "--stt-streaming-models", ("STT_STREAMING_MODELS",), "", "ASR models asked with stream=true"
    ),
    Flag("--stt-rate", ("GATEWAY_STT_RATE",), "16000", "sample rate uploaded to the ASR server"),
    Flag("--stt-max-seconds", ("GATEWAY_STT_MAX_SECONDS",), "60", "longest utterance buffered"),
    Flag("--stt-prompt", ("STT_PROMPT",), "", "optional ASR prompt"),
    Flag(
        "--tts-openai-url", ("TTS_OPENAI_URL",), "http://127.0.0.1:8880/v1", "TTS server base URL"
    ),
    Flag("--tts-openai-key", ("TTS_OPENAI_KEY",), "", "TTS bearer key (never logged)"),
    Flag("--tts-models", ("TTS_MODELS",), "", "TTS models, first is the default"),
    Flag("--tts-voices", ("TTS_VOICES",), "", "TTS voices, first is the default"),
    Flag("--tts-speed", ("TTS_SPEED",), "", "TTS speed (0.25-4), empty = backend default"),
    Flag("--tts-pcm-rate", ("GATEWAY_TTS_PCM_RATE",), "24000", "rate of the backend's raw PCM"),
    Flag(
        "--tts-output-rate", ("GATEWAY_TTS_OUTPUT_RATE",), "24000", "rate sent to Wyoming clients"
    ),
    Flag("--tts-concurrency", ("TTS_CONCURRENT_REQUESTS",), "4", "sentences synthesized ahead"),
    Flag("--tts-streaming", ("GATEWAY_TTS_STREAMING",), "true", "advertise streaming synthesis"),
    Flag("--languages", ("WYOMING_LANGUAGES",), "en", "languages when a backend names none"),
    Flag("--connect-timeout", ("GATEWAY_CONNECT_TIMEOUT",), "3", "seconds to connect upstream"),
    Flag(
        "--first-byte-timeout", ("GATEWAY_FIRST_BYTE_TIMEOUT",), "10", "seconds to the first byte"
    ),
    Flag("--total-timeout", ("GATEWAY_TOTAL_TIMEOUT",), "60", "seconds for a whole upstream call"),
    Flag(
        "--refresh-interval", ("GATEWAY_REFRESH_INTERVAL",), "30", "seconds between backend probes"
    ),
    Flag("--zeroconf", ("GATEWAY_ZEROCONF",), "", "advertise over mDNS under this name ('' = off)"),
    Flag(
        "--advertise-host",
        ("GATEWAY_ADVERTISE_HOST",),
        "",
        "address or host name announced by zeroconf",
    ),
    Flag("--max-connections", ("GATEWAY_MAX_CONNECTIONS",), "64", "concurrent Wyoming connections"),
    Flag("--log-level", ("WYOMING_LOG_LEVEL", "GATEWAY_LOG_LEVEL"), "INFO", "logging level"),
)

_BOOL_TRUE = {"1", "true", "yes", "on"}


def split_list(value: str) -> tuple[str, ...]:
    """wyoming-openai lists are space separated; commas work too."""
    return tuple(item for item in re.split(r"[\s,]+", value) if item)


def public_url(url: str) -> str:
    """A URL fit to show (Wyoming info, /health, error texts): without user:password@, query
    string or fragment, which may carry credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<invalid URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]+")


def redact_urls(text: str) -> str:
    """`text` (an exception's message, say) with every URL in it passed through `public_url`."""
    return _URL_IN_TEXT.sub(lambda m: public_url(m.group(0)), text)


# RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens
_HOSTNAME = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?$")


def _advertise_host(value: str) -> str:
    """An IP address or a host name (resolved when zeroconf starts), else a clear exit."""
    value = value.strip()
    if not value:
        return ""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME.match(value):
        raise SystemExit(
            f"voice-stack-gateway: --advertise-host must be an IP address or a host name,"
            f" got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings for one gateway process."""

    uri: str
    http_uri: str
    stt_url: str
    stt_key: str
    stt_models: tuple[str, ...]
    stt_streaming_models: tuple[str, ...]
    stt_rate: int
    stt_max_seconds: float
    stt_prompt: str
    tts_url: str
    tts_key: str
    tts_models: tuple[str, ...]
    tts_voices: tuple[str, ...]
    tts_speed: float | None
    tts_pcm_rate: int
    tts_output_rate: int
    tts_concurrency: int
    tts_streaming: bool
    languages: tuple[str, ...]
    connect_timeout: float
    first_byte_timeout: float
    total_timeout: float
    refresh_interval: float
    zeroconf: str
    advertise_host: str
    max_connections: int
    log_level: str


def _env_default(flag: Flag, environ: Mapping[str, str]) -> str:
    for name in flag.env:
        if name in environ:
            return environ[name]
    return flag.default


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-stack-gateway",
        description="Wyoming server for OpenAI-compatible ASR/TTS servers.",
    )
    for flag in FLAGS:
        # `--zeroconf` alone uses the default name, like rhasspy's Wyoming servers
        extra: dict[str, str] = (
            {"nargs": "?", "const": "voice-stack-gateway"} if flag.flag == "--zeroconf" else {}
        )
        parser.add_argument(
            flag.flag,
            default=_env_default(flag, environ),
            help=f"{flag.help} (env {', '.join(flag.env)}; default {flag.default!r})",
            **extra,  # type: ignore[arg-type]
        )
    parser.add_argument("--version", action="version", version=__version__)
    return parser


def _positive(name: str, value: str, cast: type[float] | type[int]) -> float:
    try:
        number = cast(value)
    except ValueError:
        raise SystemExit(f"voice-stack-gateway: {name} must be a number, got {value!r}") from None
    if number <= 0:
        raise SystemExit(f"voice-stack-gateway: {name} must be positive, got {value!r}")
    return number


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags over environment defaults; exit with a clear message on bad values."""
    ns = build_parser(os.environ if environ is None else environ).parse_args(argv)
    speed = _positive("--tts-speed", ns.tts_speed, float) if ns.tts_speed else None
    return Settings(
        uri=ns.uri,
        http_uri=ns.http_uri,
        stt_url=ns.stt_openai_url.rstrip("/"),
        stt_key=ns.stt_openai_key,
        stt_models=split_list(ns.stt_models),
        stt_streaming_models=split_list(ns.stt_streaming_models),
        stt_rate=int(_positive("--stt-rate", ns.stt_rate, int)),
        stt_max_seconds=_positive("--stt-max-seconds", ns.stt_max_seconds, float),
        stt_prompt=ns.stt_prompt,
        tts_url=ns.tts_openai_url.rstrip("/"),
        tts_key=ns.tts_openai_key,
        tts_models=split_list(ns.tts_models),
        tts_voices=split_list(ns.tts_voices),
        tts_speed=speed,
        tts_pcm_rate=int(_positive("--tts-pcm-rate", ns.tts_pcm_rate, int)),
        tts_output_rate=int(_positive("--tts-output-rate", ns.tts_output_rate, int)),
        tts_concurrency=int(_positive("--tts-concurrency", ns.tts_concurrency, int)),
        tts_streaming=ns.tts_streaming.strip().lower() in _BOOL_TRUE,
        languages=split_list(ns.languages) or ("en",),
        connect_timeout=_positive("--connect-timeout", ns.connect_timeout, float),
        first_byte_timeout=_positive("--first-byte-timeout", ns.first_byte_timeout, float),
        total_timeout=_positive("--total-timeout", ns.total_timeout, float),
        refresh_interval=_positive("--refresh-interval", ns.refresh_interval, float),
        zeroconf=ns.zeroconf,
        advertise_host=_advertise_host(ns.advertise_host),
        max_connections=int(_positive("--max-connections", ns.max_connections, int)),
        log_level=ns.log_level.upper(),
    )


def env_table() -> str:
    """Markdown table of flags and environment names (for the README)."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for flag in FLAGS:
        env = ", ".join(f"`{name}`" for name in flag.env)
        rows.append(f"| `{flag.flag}` | {env} | `{flag.default}` | {flag.help} |")
    return "\n".join(rows)
