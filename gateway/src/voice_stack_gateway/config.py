"""Validated settings for one gateway process, parsed from flags over environment defaults."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .admission import Network, parse_allow
from .flags import FLAGS, ZEROCONF_NAME, build_parser

__all__ = ["FLAGS", "Settings", "parse_settings", "split_list"]

HA_CAP_MS = 15_000  # HA's VoiceCommandSegmenter.timeout_seconds: the longest turn it streams
_BOOL_TRUE = {"1", "true", "yes", "on"}
_BOOL_FALSE = {"", "0", "false", "no", "off"}


def split_list(value: str) -> tuple[str, ...]:
    """wyoming-openai lists are space separated; commas work too."""
    return tuple(item for item in re.split(r"[\s,]+", value) if item)


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


def _zeroconf_name(value: str) -> str:
    """The service name to advertise; '' (off) for the usual off words, the default name for
    the on words (so `GATEWAY_ZEROCONF=false` never advertises a service called "false")."""
    word = value.strip()
    if word.lower() in _BOOL_FALSE:
        return ""
    return ZEROCONF_NAME if word.lower() in _BOOL_TRUE else word


def _number(name: str, value: str, cast: type[float] | type[int]) -> float:
    try:
        return cast(value)
    except ValueError:
        raise SystemExit(f"voice-stack-gateway: {name} must be a number, got {value!r}") from None


def _positive(name: str, value: str, cast: type[float] | type[int]) -> float:
    number = _number(name, value, cast)
    if number <= 0:
        raise SystemExit(f"voice-stack-gateway: {name} must be positive, got {value!r}")
    return number


def _at_least(name: str, value: str, minimum: int) -> int:
    number = int(_number(name, value, int))
    if number < minimum:
        raise SystemExit(f"voice-stack-gateway: {name} must be at least {minimum}, got {value!r}")
    return number


def _networks(value: str) -> tuple[Network, ...]:
    try:
        networks = parse_allow(value)
    except ValueError as exc:
        raise SystemExit(f"voice-stack-gateway: --allow: {exc}") from None
    if not networks:
        raise SystemExit("voice-stack-gateway: --allow names no network ('any' allows everyone)")
    return networks


def _bool(name: str, value: str) -> bool:
    word = value.strip().lower()
    if word not in _BOOL_TRUE | _BOOL_FALSE:
        raise SystemExit(f"voice-stack-gateway: {name} must be true or false, got {value!r}")
    return word in _BOOL_TRUE


# --stt-eagerness: (--stt-endpoint-ms, --stt-endpoint-weak-ms, --stt-incomplete-hold-ms), chosen
# on the room corpus (bench/room_bench.py; docs/gateway.md's table): high ends soonest and cuts
# the most pauses where a request looks complete, low waits longer than Home Assistant's default
# hold. The own VAD's hold is the weak endpoint + 300 ms: at 1000 for medium it cut 5 more
# pauses where a request cannot end than at 1300, and was late as often (docs/benchmarks.md).
EAGERNESS = {"low": (1000, 1300, 1600), "medium": (700, 1000, 1300), "high": (400, 700, 1000)}
# With the own VAD, HA's own hold of the same eagerness (its relaxed, default and aggressive
# "finished speaking detection"), which the gateway counts as HA would (stt/ha_hold.py) and
# ends a turn soon after.
HA_HOLDS = {"low": 1250, "medium": 700, "high": 250}


def _endpoints(ns: argparse.Namespace) -> tuple[int, int, int]:
    """The two endpoints and the own VAD's hold: each as set, else the eagerness's."""
    level = ns.stt_eagerness.strip().lower()
    if level not in EAGERNESS:
        raise SystemExit(
            f"voice-stack-gateway: --stt-eagerness must be one of {', '.join(EAGERNESS)},"
            f" got {ns.stt_eagerness!r}"
        )
    strong, weak, hold = EAGERNESS[level]
    if ns.stt_endpoint_ms.strip():
        strong = _at_least("--stt-endpoint-ms", ns.stt_endpoint_ms, 0)
    if ns.stt_endpoint_weak_ms.strip():
        weak = _at_least("--stt-endpoint-weak-ms", ns.stt_endpoint_weak_ms, 0)
    if ns.stt_incomplete_hold_ms.strip():
        hold = _at_least("--stt-incomplete-hold-ms", ns.stt_incomplete_hold_ms, 1)
    return strong, weak, max(hold, strong)


def _logprob(value: str) -> float | None:
    """--stt-unsure-logprob: a log-probability (0 or below), or off."""
    word = value.strip().lower()
    if word in ("", "off"):
        return None
    try:
        number = float(word)
    except ValueError:
        number = math.nan
    if not number <= 0:
        raise SystemExit(
            "voice-stack-gateway: --stt-unsure-logprob must be a log-probability of 0 or below"
            f" (whisper's avg_logprob, e.g. -0.6), or off; got {value!r}"
        )
    return number


def _check_own_vad(ns: argparse.Namespace) -> None:
    """The own end of speech is built on early transcription and the end of turn: without
    them no turn could end before the 15 s cap."""
    if not _bool("--stt-own-vad", ns.stt_own_vad):
        return
    early = _at_least("--stt-early-pause-ms", ns.stt_early_pause_ms, 0)
    endpoint = _endpoints(ns)[0]
    if not early or not endpoint:
        raise SystemExit(
            "voice-stack-gateway: --stt-own-vad needs early transcription and the end of turn"
            " (--stt-early-pause-ms and --stt-endpoint-ms above 0)"
        )
    hold = ns.stt_incomplete_hold_ms.strip()
    if hold and _at_least("--stt-incomplete-hold-ms", hold, 1) < endpoint:
        raise SystemExit(
            f"voice-stack-gateway: --stt-incomplete-hold-ms ({hold}) must be at least"
            f" --stt-endpoint-ms ({endpoint})"
        )
    longest = _positive("--stt-max-seconds", ns.stt_max_seconds, float)
    if longest * 1000 < HA_CAP_MS:  # a long turn would end in audio-too-long, not at the cap
        raise SystemExit(
            f"voice-stack-gateway: --stt-own-vad ends a turn at Home Assistant's"
            f" {HA_CAP_MS // 1000} s cap: --stt-max-seconds ({longest:g}) must be at least that"
        )


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
    stt_early_pause_ms: int
    stt_early_max: int
    stt_endpoint_ms: int
    stt_endpoint_weak_ms: int
    stt_own_vad: bool
    stt_incomplete_hold_ms: int
    stt_ha_hold_ms: int
    stt_unsure_logprob: float | None
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
    max_connections_per_host: int
    allow: tuple[Network, ...]
    idle_timeout: float
    log_level: str


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Parse flags over environment defaults; exit with a clear message on bad values."""
    ns = build_parser(os.environ if environ is None else environ).parse_args(argv)
    _check_own_vad(ns)
    endpoint, weak, hold = _endpoints(ns)
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
        stt_early_pause_ms=_at_least("--stt-early-pause-ms", ns.stt_early_pause_ms, 0),
        stt_early_max=_at_least("--stt-early-max", ns.stt_early_max, 1),
        stt_endpoint_ms=endpoint,
        stt_endpoint_weak_ms=weak,
        stt_own_vad=_bool("--stt-own-vad", ns.stt_own_vad),
        stt_incomplete_hold_ms=hold,
        stt_ha_hold_ms=HA_HOLDS[ns.stt_eagerness.strip().lower()],
        stt_unsure_logprob=_logprob(ns.stt_unsure_logprob),
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
        zeroconf=_zeroconf_name(ns.zeroconf),
        advertise_host=_advertise_host(ns.advertise_host),
        max_connections=int(_positive("--max-connections", ns.max_connections, int)),
        max_connections_per_host=int(
            _positive("--max-connections-per-host", ns.max_connections_per_host, int)
        ),
        allow=_networks(ns.allow),
        idle_timeout=_positive("--idle-timeout", ns.idle_timeout, float),
        log_level=ns.log_level.upper(),
    )
