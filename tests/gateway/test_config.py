"""config.py: validated settings from flags over the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_stack_gateway.config import EAGERNESS, HA_HOLDS, parse_settings, split_list


def test_settings_from_env_and_flags() -> None:
    env = {
        "STT_OPENAI_URL": "http://asr:8000/v1/",
        "TTS_VOICES": "af_heart, am_adam",
        "TTS_SPEED": "1.25",
        "WYOMING_URI": "tcp://0.0.0.0:10300",
        "GATEWAY_TTS_STREAMING": "off",
        "STT_MODELS": "a b,c",
        "TTS_OPENAI_KEY": "secret",
    }
    s = parse_settings([], env)
    assert s.stt_url == "http://asr:8000/v1"
    assert s.tts_voices == ("af_heart", "am_adam")
    assert s.tts_speed == 1.25
    assert not s.tts_streaming
    assert s.stt_models == ("a", "b", "c")
    assert s.tts_key == "secret"
    assert parse_settings(["--uri", "tcp://127.0.0.1:1"], env).uri == "tcp://127.0.0.1:1"
    assert split_list(" ") == ()


@pytest.mark.parametrize(
    "bad",
    [
        ["--tts-speed", "x"],
        ["--stt-rate", "-1"],
        ["--stt-early-pause-ms", "-5"],
        ["--stt-early-max", "0"],
        ["--stt-early-max", "two"],
        ["--stt-endpoint-ms", "-1"],
        ["--stt-own-vad", "maybe"],
        ["--stt-incomplete-hold-ms", "0"],
        ["--stt-unsure-logprob", "0.5"],
        ["--stt-unsure-logprob", "nan"],
        ["--stt-unsure-logprob", "sure"],
        ["--allow", "192.168.1.0/33"],
        ["--allow", " , "],
        ["--idle-timeout", "0"],
        ["--max-connections-per-host", "0"],
    ],
)
def test_bad_values_stop_with_a_message(bad: list[str]) -> None:
    with pytest.raises(SystemExit, match=bad[0]):
        parse_settings(bad, {})


@pytest.mark.parametrize(
    ("value", "limit"), [(None, -0.6), ("-1.5", -1.5), ("0", 0.0), ("off", None), ("", None)]
)
def test_the_unsure_logprob(value: str | None, limit: float | None) -> None:
    env = {} if value is None else {"STT_UNSURE_LOGPROB": value}
    assert parse_settings([], env).stt_unsure_logprob == limit


def test_early_transcription_settings() -> None:
    s = parse_settings([], {})
    assert (s.stt_early_pause_ms, s.stt_early_max) == (300, 3)
    off = parse_settings([], {"STT_EARLY_PAUSE_MS": "0", "STT_EARLY_MAX": "1"})
    assert (off.stt_early_pause_ms, off.stt_early_max) == (0, 1)


def test_end_of_turn_settings() -> None:
    default = parse_settings([], {})
    assert (
        default.stt_endpoint_ms,
        default.stt_endpoint_weak_ms,
        default.stt_incomplete_hold_ms,
    ) == EAGERNESS["medium"]
    assert parse_settings([], {"STT_ENDPOINT_MS": "0"}).stt_endpoint_ms == 0
    assert (
        parse_settings(["--stt-endpoint-ms", "500"], {"STT_ENDPOINT_MS": "0"}).stt_endpoint_ms
        == 500
    )
    assert parse_settings([], {"STT_ENDPOINT_WEAK_MS": "0"}).stt_endpoint_weak_ms == 0
    weak = parse_settings(["--stt-endpoint-weak-ms", "900"], {"STT_ENDPOINT_WEAK_MS": "0"})
    assert weak.stt_endpoint_weak_ms == 900


@pytest.mark.parametrize("level", ["low", "medium", "high", " High "])
def test_eagerness_sets_the_endpoints_and_hold_unless_one_is_set(level: str) -> None:
    strong, weak, hold = EAGERNESS[level.strip().lower()]
    s = parse_settings([], {"STT_EAGERNESS": level})
    assert (s.stt_endpoint_ms, s.stt_endpoint_weak_ms, s.stt_incomplete_hold_ms) == (
        strong,
        weak,
        hold,
    )
    own = parse_settings(["--stt-eagerness", level, "--stt-endpoint-ms", "550"], {})
    assert (own.stt_endpoint_ms, own.stt_endpoint_weak_ms) == (550, weak)
    assert own.stt_ha_hold_ms == HA_HOLDS[level.strip().lower()]  # HA's own hold of that level
    held = parse_settings(["--stt-eagerness", level], {"STT_INCOMPLETE_HOLD_MS": "2000"})
    assert held.stt_incomplete_hold_ms == 2000


def test_the_own_hold_is_never_shorter_than_the_endpoint() -> None:
    """A longer endpoint than the eagerness's hold raises the hold it did not set."""
    s = parse_settings([], {"STT_EAGERNESS": "high", "STT_ENDPOINT_MS": "1200"})
    assert s.stt_incomplete_hold_ms == 1200


def test_an_unknown_eagerness_is_refused() -> None:
    with pytest.raises(SystemExit, match="--stt-eagerness must be one of low, medium, high"):
        parse_settings([], {"STT_EAGERNESS": "eager"})


def test_own_vad_settings() -> None:
    s = parse_settings([], {})
    assert (s.stt_own_vad, s.stt_incomplete_hold_ms) == (False, EAGERNESS["medium"][2])
    on = parse_settings(["--stt-own-vad"], {"STT_INCOMPLETE_HOLD_MS": "900"})
    assert (on.stt_own_vad, on.stt_incomplete_hold_ms) == (True, 900)
    assert parse_settings([], {"STT_OWN_VAD": "1"}).stt_own_vad
    assert not parse_settings(["--stt-own-vad", "off"], {"STT_OWN_VAD": "1"}).stt_own_vad


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STT_EARLY_PAUSE_MS": "0"}, "needs early transcription and the end of turn"),
        ({"STT_ENDPOINT_MS": "0"}, "needs early transcription and the end of turn"),
        ({"STT_INCOMPLETE_HOLD_MS": "300"}, r"\(300\) must be at least --stt-endpoint-ms \(700\)"),
        ({"GATEWAY_STT_MAX_SECONDS": "10"}, r"15 s cap: --stt-max-seconds \(10\) must be at least"),
    ],
)
def test_own_vad_needs_the_end_of_turn(env: dict[str, str], message: str) -> None:
    """Without early transcription and the end of turn no turn could end before 15 s."""
    with pytest.raises(SystemExit, match=message):
        parse_settings([], {"STT_OWN_VAD": "true", **env})
    parse_settings([], env)  # the same values are fine while the setting is off


def test_wyoming_uri_alone_is_used() -> None:
    """A drop-in wyoming-openai user sets only WYOMING_URI (the image sets no GATEWAY_URI)."""
    assert parse_settings([], {"WYOMING_URI": "tcp://0.0.0.0:10555"}).uri == "tcp://0.0.0.0:10555"
    both = {"WYOMING_URI": "tcp://0.0.0.0:10555", "GATEWAY_URI": "tcp://0.0.0.0:10666"}
    assert parse_settings([], both).uri == "tcp://0.0.0.0:10666"
    assert parse_settings([], {}).uri == "tcp://0.0.0.0:10300"


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ([], ""),
        (["--zeroconf"], "voice-stack-gateway"),
        (["--zeroconf", "kitchen-gw"], "kitchen-gw"),
        (["--zeroconf", "false"], ""),
        (["--zeroconf", "OFF"], ""),
        (["--zeroconf", "0"], ""),
        (["--zeroconf", "true"], "voice-stack-gateway"),
        (["--zeroconf="], ""),
    ],
)
def test_zeroconf_name_and_off_values(given: list[str], name: str) -> None:
    assert parse_settings(given, {}).zeroconf == name
    if given[1:]:
        assert parse_settings([], {"GATEWAY_ZEROCONF": given[1]}).zeroconf == name


def test_keys_from_files(tmp_path: Path) -> None:
    """Docker secrets: KEY_FILE names a file holding the key; it wins over KEY, a flag wins over
    both, and a file that cannot be read stops startup with its name (never the key)."""
    secret = tmp_path / "stt_key"
    secret.write_text("sk-from-file\n")
    env = {"STT_OPENAI_KEY_FILE": str(secret), "STT_OPENAI_KEY": "sk-plain"}
    assert parse_settings([], env).stt_key == "sk-from-file"
    assert parse_settings(["--stt-openai-key", "sk-flag"], env).stt_key == "sk-flag"
    assert parse_settings([], {"TTS_OPENAI_KEY_FILE": str(secret)}).tts_key == "sk-from-file"
    with pytest.raises(SystemExit, match="TTS_OPENAI_KEY_FILE"):
        parse_settings([], {"TTS_OPENAI_KEY_FILE": str(tmp_path / "missing")})


def test_advertise_host_forms() -> None:
    host = parse_settings(["--advertise-host", "gpu-box.lan"], {}).advertise_host
    assert host == "gpu-box.lan"
    assert parse_settings(["--advertise-host", " 10.0.0.7 "], {}).advertise_host == "10.0.0.7"
    assert parse_settings([], {"GATEWAY_ADVERTISE_HOST": "fd00::2"}).advertise_host == "fd00::2"
    for bad in ("http://gpu-box", "gpu box", "-x.lan", "a..b"):
        with pytest.raises(SystemExit, match="IP address or a host name"):
            parse_settings([f"--advertise-host={bad}"], {})
