"""The command line: every flag has environment names (wyoming-openai's kept where they exist),
a `_FILE` form for the keys (Docker secrets), and the table gateway/README.md shows."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import __version__

ZEROCONF_NAME = "voice-stack-gateway"


@dataclass(frozen=True, slots=True)
class Flag:
    """One option: its flag, its environment names (first wins), its default and help. A
    `secret` is also read from the file named by `<NAME>_FILE`; `const` is the value of the flag
    given without one."""

    flag: str
    env: tuple[str, ...]
    default: str
    help: str
    secret: bool = False
    const: str | None = None


FLAGS: tuple[Flag, ...] = (
    Flag("--uri", ("GATEWAY_URI", "WYOMING_URI"), "tcp://0.0.0.0:10300", "Wyoming listen URI"),
    Flag(
        "--http-uri",
        ("GATEWAY_HTTP_URI",),
        "tcp://0.0.0.0:10301",
        "health/metrics port; '' disables",
    ),
    Flag(
        "--stt-openai-url", ("STT_OPENAI_URL",), "http://127.0.0.1:8000/v1", "STT server base URL"
    ),
    Flag("--stt-openai-key", ("STT_OPENAI_KEY",), "", "STT bearer key (never logged)", secret=True),
    Flag(
        "--stt-models",
        ("STT_MODELS",),
        "",
        "STT models, first is the default (space or comma list)",
    ),
    Flag(
        "--stt-streaming-models", ("STT_STREAMING_MODELS",), "", "STT models asked with stream=true"
    ),
    Flag("--stt-rate", ("GATEWAY_STT_RATE",), "16000", "sample rate uploaded to the STT server"),
    Flag("--stt-max-seconds", ("GATEWAY_STT_MAX_SECONDS",), "60", "longest utterance buffered"),
    Flag("--stt-prompt", ("STT_PROMPT",), "", "optional STT prompt"),
    Flag(
        "--stt-early-pause-ms",
        ("STT_EARLY_PAUSE_MS",),
        "300",
        "a pause this long starts an early transcription; 0 = off",
    ),
    Flag("--stt-early-max", ("STT_EARLY_MAX",), "3", "early transcriptions per utterance"),
    Flag(
        "--stt-eagerness",
        ("STT_EAGERNESS",),
        "medium",
        "how soon the gateway ends a turn whose words read complete: low, medium or high (each"
        " a set of the two endpoints and the hold below; docs/gateway.md's table says what each"
        " trades)",
    ),
    Flag(
        "--stt-endpoint-ms",
        ("STT_ENDPOINT_MS",),
        "",
        "an early transcript that reads complete after a pause this long ends the turn before"
        " audio-stop; 0 = off; empty = by --stt-eagerness",
    ),
    Flag(
        "--stt-endpoint-weak-ms",
        ("STT_ENDPOINT_WEAK_MS",),
        "",
        "the pause an early transcript that reads complete only weakly needs (its last words"
        " may be a cut-off 'the' or 'to' misheard: 'in it', 'in there', 'me too'); 0 = the"
        " same as --stt-endpoint-ms; empty = by --stt-eagerness",
    ),
    Flag(
        "--stt-unsure-logprob",
        ("STT_UNSURE_LOGPROB",),
        "-0.6",
        "an early transcript that reads complete but that the ASR was this unsure of (whisper's"
        " avg_logprob in a verbose_json answer, below this) reads complete only weakly: in a"
        " noisy room a cut-off 'Lock the' is heard as 'Longbow.'; off = never ask verbose_json",
    ),
    Flag(
        "--stt-own-vad",
        ("STT_OWN_VAD",),
        "false",
        "the gateway ends every turn itself (info says requires_external_vad: false, so Home"
        " Assistant skips its own VAD); alone: true",
        const="true",
    ),
    Flag(
        "--stt-incomplete-hold-ms",
        ("STT_INCOMPLETE_HOLD_MS",),
        "",
        "with --stt-own-vad: the pause that ends a turn whose words do not read complete;"
        " empty = by --stt-eagerness (its weak endpoint + 300 ms)",
    ),
    Flag(
        "--tts-openai-url", ("TTS_OPENAI_URL",), "http://127.0.0.1:8880/v1", "TTS server base URL"
    ),
    Flag("--tts-openai-key", ("TTS_OPENAI_KEY",), "", "TTS bearer key (never logged)", secret=True),
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
        "--first-byte-timeout",
        ("GATEWAY_FIRST_BYTE_TIMEOUT",),
        "10",
        "seconds to the first byte, and of silence mid-stream (a sentence synthesized ahead:"
        " one more for each sentence before it)",
    ),
    Flag("--total-timeout", ("GATEWAY_TOTAL_TIMEOUT",), "60", "seconds for a whole upstream call"),
    Flag(
        "--refresh-interval", ("GATEWAY_REFRESH_INTERVAL",), "30", "seconds between backend probes"
    ),
    Flag(
        "--zeroconf",
        ("GATEWAY_ZEROCONF",),
        "",
        f"advertise over mDNS under this name (alone: {ZEROCONF_NAME}; '', false, off = off)",
        const=ZEROCONF_NAME,
    ),
    Flag(
        "--advertise-host",
        ("GATEWAY_ADVERTISE_HOST",),
        "",
        "address or host name announced by zeroconf",
    ),
    Flag("--max-connections", ("GATEWAY_MAX_CONNECTIONS",), "64", "concurrent Wyoming connections"),
    Flag(
        "--max-connections-per-host",
        ("GATEWAY_MAX_CONNECTIONS_PER_HOST",),
        "32",
        "concurrent Wyoming connections from one address (so one host cannot take them all)",
    ),
    Flag(
        "--allow",
        ("GATEWAY_ALLOW",),
        "private",
        "client networks allowed on both ports (CIDR or addresses, comma list; 'private' ="
        " loopback, private, link-local and 100.64/10 ranges; 'any' = everyone)",
    ),
    Flag(
        "--idle-timeout",
        ("GATEWAY_IDLE_TIMEOUT",),
        "60",
        "seconds a client may send nothing (or read nothing) while it is owed no answer",
    ),
    Flag("--log-level", ("WYOMING_LOG_LEVEL", "GATEWAY_LOG_LEVEL"), "INFO", "logging level"),
)


def env_names(flag: Flag) -> tuple[str, ...]:
    """Every environment name a flag reads, `_FILE` forms first (they win over plain values)."""
    files = tuple(f"{name}_FILE" for name in flag.env) if flag.secret else ()
    return files + flag.env


def _read_secret(name: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeError) as exc:
        raise SystemExit(f"voice-stack-gateway: cannot read {name}={path!r}: {exc}") from None


def env_default(flag: Flag, environ: Mapping[str, str]) -> str:
    """The value the environment gives a flag (CLI > `_FILE` > plain variable), else its default."""
    for name in env_names(flag):
        if name in environ:
            return _read_secret(name, environ[name]) if name.endswith("_FILE") else environ[name]
    return flag.default


def env_table() -> str:
    """Markdown table of flags and environment names (for the README)."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for flag in FLAGS:
        env = ", ".join(f"`{name}`" for name in (*flag.env, *env_names(flag)[: -len(flag.env)]))
        rows.append(f"| `{flag.flag}` | {env} | `{flag.default}` | {flag.help} |")
    return "\n".join(rows)


class _PrintEnvTable(argparse.Action):
    """`--print-env-table`: print the README's table of flags and environment names, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(env_table())
        parser.exit()


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-stack-gateway",
        description="Wyoming server for OpenAI-compatible STT/TTS servers.",
    )
    for flag in FLAGS:
        env = ", ".join(env_names(flag))
        parser.add_argument(
            flag.flag,
            default=env_default(flag, environ),
            help=f"{flag.help} (env {env}; default {flag.default!r})",
            nargs="?" if flag.const is not None else None,
            const=flag.const,
        )
    parser.add_argument(
        "--print-env-table",
        action=_PrintEnvTable,
        help="print the table of flags and environment variables, then exit",
    )
    parser.add_argument("--version", action="version", version=__version__)
    return parser
