"""compose/stack-setup.sh: what `./stack init` and `./stack connect` tell a user to enter in Home
Assistant, `./stack key`, and `./stack upgrade` of a .env an older checkout wrote.

The older files are real: env_history/env.example.<commit> are compose/.env.example as committed
in c1687ef (2026-12-01: three keys, no STACK_DEVICE, the unpinned gateway release image) and
5d30a97 (2026-11-30: one client key, image pins by tag only), filled in the way a user did. The
hosts are stand-in docker and nvidia-smi programs (stack_helpers); Compose is the real binary."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.compose.stack_helpers import (
    COMPOSE_BIN,
    COMPOSE_DIR,
    KEYS,
    STACK,
    example_values,
    stack,
    stack_env,
    stand_in,
    stand_in_host,
    write_env_file,
)
from voice_stack_dev.paths import MODELS, REPO

HISTORY = Path(__file__).parent / "env_history"
NVIDIA = '{"nvidia":{"path":"nvidia-container-runtime"}}'
HOST = {
    "FAKE_ENGINE": "28.5.2",
    "FAKE_BUILDX": "0.29.1",
    "FAKE_RUNTIMES": NVIDIA,
    "FAKE_GPUS": "NVIDIA GeForce RTX 4090, 575.64.03, 8.9",
}
KEY_RE = re.compile(r"^[A-Za-z0-9._~+/=-]{16,256}$")

# `ip -4 route get 1.1.1.1` and `hostname -I` of a host on a home LAN (FAKE_* empty: they fail,
# as on a host without a route, or hostname without -I).
STAND_IN_IP = """#!/usr/bin/env bash
[[ "$*" == "-4 route get 1.1.1.1" ]] ||
  { echo "stand-in ip: unexpected arguments: $*" >&2; exit 99; }
[[ -n "${FAKE_ROUTE_SRC:-}" ]] || { echo "RTNETLINK answers: Network is unreachable" >&2; exit 2; }
echo "1.1.1.1 via 192.168.1.1 dev eth0 src $FAKE_ROUTE_SRC uid 1000"
echo "    cache"
"""
STAND_IN_HOSTNAME = """#!/usr/bin/env bash
[[ "$*" == -I && -n "${FAKE_HOST_ADDRESSES:-}" ]] ||
  { echo "hostname: invalid option" >&2; exit 1; }
echo "$FAKE_HOST_ADDRESSES "
"""

# The real Compose, every call logged; `up` itself only logged (no engine runs here).
COMPOSE_UP_LOGGED = """#!/usr/bin/env bash
echo "$*" >>"$FAKE_DOCKER_LOG.compose"
for arg in "$@"; do [[ "$arg" != up ]] || exit 0; done
exec "{real}" "$@"
"""


def env_values(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"^[A-Z_]+=", line))


def lan(tmp_path: Path, route: str = "192.168.1.20", addresses: str = "") -> dict[str, str]:
    """A host whose route lookup and `hostname -I` answer as given."""
    bin_dir = tmp_path / "lan-bin"
    stand_in(bin_dir, "ip", STAND_IN_IP)
    stand_in(bin_dir, "hostname", STAND_IN_HOSTNAME)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_ROUTE_SRC": route,
        "FAKE_HOST_ADDRESSES": addresses,
    }


def on_tty(env_file: Path, *args: str, extra_env: dict[str, str]) -> tuple[int, str, str]:
    """./stack with stdout on a terminal (a pty), as a user runs it: status, stdout, stderr."""
    leader, follower = pty.openpty()
    with subprocess.Popen(
        [str(STACK), *args],
        env=stack_env(env_file, extra_env),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    ) as proc:
        os.close(follower)
        chunks = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], deadline - time.monotonic())
            try:
                chunk = os.read(leader, 4096) if ready else b""
            except OSError:  # EIO: the program closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    os.close(leader)
    return status, b"".join(chunks).decode().replace("\r\n", "\n"), stderr


# ------------------------------------------------------------------------------------------------
# ./stack init and ./stack connect


def test_init_ends_with_what_home_assistant_asks_for(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    status, out, err = on_tty(env, "init", "--cpu", extra_env=lan(tmp_path))
    assert status == 0, err
    agent_key = env_values(env)["LLM_AGENT_KEY"]
    assert (
        "  1. set LLM_MODELS_DIR (the folder of your GGUF files) and LLM_MODEL_FILE in "
        f"{env}\n  2. ./stack check\n  3. ./stack up -d\n"
    ) in out
    # The labels of the Voice Stack form (translations/en.json) and of HA's Wyoming form.
    assert (
        "  Voice Stack\n"
        "    URL:          http://192.168.1.20:11434\n"
        f"    Agent key:    {agent_key}\n"
        "    Gateway URL:  http://192.168.1.20:10301\n"
        "  Wyoming Protocol\n"
        "    Host:         192.168.1.20\n"
        "    Port:         10300\n"
    ) in out
    assert "Note:" not in out
    assert not [name for name in KEYS if env_values(env)[name] in err]


def test_the_key_is_printed_to_a_terminal_only(tmp_path: Path) -> None:
    """Redirected (a log file, a pipe to tee), the block names the command instead of the key."""
    env = tmp_path / ".env"
    result = stack(env, "init", "--cpu", extra_env=lan(tmp_path))
    assert result.returncode == 0, result.stderr
    keys = [env_values(env)[name] for name in KEYS]
    assert (
        "    Agent key:    (not shown: this output is not a terminal; ./stack key agent prints it)"
    ) in result.stdout
    assert not [key for key in keys if key in result.stdout + result.stderr]
    result = stack(env, "connect", extra_env=lan(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "./stack key agent prints it" in result.stdout
    assert not [key for key in keys if key in result.stdout + result.stderr]


def test_connect_reads_the_ports_and_binds_of_env(tmp_path: Path) -> None:
    env = write_env_file(tmp_path / ".env")
    settings = {"LLM_PROXY_PORT": "11500", "GATEWAY_PORT": "10400", "GATEWAY_HTTP_PORT": "10401"}
    text = env.read_text() + "".join(f"{k}={v}\n" for k, v in settings.items())
    env.write_text(text + "GATEWAY_BIND=10.0.0.7\nLLM_PROXY_BIND=127.0.0.1\n")
    status, out, err = on_tty(env, "connect", extra_env=lan(tmp_path))
    assert status == 0, err
    assert "1. set LLM_MODELS_DIR" not in out  # set already
    assert "  1. ./stack check\n  2. ./stack up -d\n" in out
    assert "    URL:          http://127.0.0.1:11500\n" in out
    assert f"    Agent key:    {KEYS['LLM_AGENT_KEY']}\n" in out
    assert "    Gateway URL:  http://192.168.1.20:10401\n" in out  # GATEWAY_HTTP_BIND: all
    assert "    Host:         10.0.0.7\n    Port:         10400\n" in out
    assert "Note: LLM_PROXY_BIND is 127.0.0.1: only this host reaches the URL above" in out


@pytest.mark.parametrize(
    ("route", "addresses", "override", "shown"),
    [
        ("192.168.1.20", "172.17.0.1 192.168.1.20", "", "192.168.1.20"),
        ("", "192.168.1.30 172.17.0.1 fd00::2", "", "192.168.1.30"),
        ("", "fd00::2", "", "[fd00::2]"),
        ("", "", "", "<this host's address>"),
        ("192.168.1.20", "", "gpu-box.lan", "gpu-box.lan"),
    ],
    ids=["route lookup", "hostname -I", "IPv6 only", "neither", "VOICE_STACK_HOST"],
)
def test_the_lan_address(
    tmp_path: Path, route: str, addresses: str, override: str, shown: str
) -> None:
    env = write_env_file(tmp_path / ".env")
    host = lan(tmp_path, route, addresses) | ({"VOICE_STACK_HOST": override} if override else {})
    result = stack(env, "connect", extra_env=host)
    assert result.returncode == 0, result.stderr
    assert f"    URL:          http://{shown}:11434\n" in result.stdout
    placeholder = "enter it in place of <this host's address>"
    assert (placeholder in result.stdout) == (shown == "<this host's address>")


def test_connect_without_the_gateway(tmp_path: Path) -> None:
    env = write_env_file(tmp_path / ".env")
    env.write_text(env.read_text() + "COMPOSE_PROFILES=speech\n")
    result = stack(env, "connect", extra_env=lan(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Wyoming Protocol" not in result.stdout
    assert "Gateway URL:" not in result.stdout
    assert "the gateway does not run here" in result.stdout


# ------------------------------------------------------------------------------------------------
# ./stack key


@pytest.mark.parametrize(
    ("which", "name"),
    [("agent", "LLM_AGENT_KEY"), ("proxy", "LLM_PROXY_KEY"), ("api", "LLM_API_KEY")],
)
def test_key_prints_only_the_value(tmp_path: Path, which: str, name: str) -> None:
    env = write_env_file(tmp_path / ".env")
    result = stack(env, "key", which)
    assert result.returncode == 0, result.stderr
    assert result.stdout == KEYS[name] + "\n"
    assert result.stderr == ""


@pytest.mark.parametrize("args", [(), ("bogus",), ("agent", "proxy")], ids=["none", "bad", "two"])
def test_key_without_a_known_key_prints_usage(tmp_path: Path, args: tuple[str, ...]) -> None:
    env = write_env_file(tmp_path / ".env")
    result = stack(env, "key", *args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: ./stack key agent|proxy|api")


def test_key_names_what_is_missing(tmp_path: Path) -> None:
    result = stack(None, "key", "agent")
    assert result.returncode == 2
    assert "no /nonexistent/.env: run ./stack init" in result.stderr
    env = write_env_file(tmp_path / ".env")
    env.write_text(env.read_text() + "LLM_AGENT_KEY=\n")
    result = stack(env, "key", "agent")
    assert result.returncode == 2
    assert "LLM_AGENT_KEY is not set in" in result.stderr


def test_help_lists_the_new_commands() -> None:
    result = stack(None, "--help")
    assert result.returncode == 0
    for line in ("./stack connect", "./stack key agent|proxy|api", "./stack upgrade [--apply]"):
        assert line in result.stdout
    assert result.stdout.rstrip().endswith("Shell variables override .env.")


# ------------------------------------------------------------------------------------------------
# ./stack upgrade


def old_env(path: Path, commit: str, mode: int = 0o600, extra: str = "") -> Path:
    """The .env an older checkout's `./stack init` wrote, with the keys and a model filled in."""
    text = (HISTORY / f"env.example.{commit}").read_text()
    values = KEYS | {"LLM_MODELS_DIR": str(MODELS), "LLM_MODEL_FILE": "tiny-text.gguf"}
    for name, value in values.items():
        text = re.sub(rf"^{name}=.*$", f"{name}={value}", text, flags=re.MULTILINE)
    path.write_text(text + extra)
    path.chmod(mode)
    return path


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    return stand_in_host(tmp_path, HOST)


def chosen_pins(host: dict[str, str], tmp_path: Path, *args: str) -> dict[str, str]:
    """The pins ./stack init writes on this host."""
    result = stack(tmp_path / "variants.env", "variants", *args, extra_env=host)
    assert result.returncode == 0, result.stderr
    return dict(line.split("=", 1) for line in result.stdout.split() if "_IMAGE=" in line)


def backups(env: Path) -> list[Path]:
    return sorted(env.parent.glob(env.name + ".bak-*"))


@pytest.mark.parametrize("commit", ["c1687ef", "5d30a97"])
def test_upgrade_an_older_env(host: dict[str, str], tmp_path: Path, commit: str) -> None:
    env = old_env(tmp_path / ".env", commit, mode=0o644)
    before_text = env.read_text()
    before = env_values(env)
    result = stack(env, "upgrade", extra_env=host)
    assert result.returncode == 0, result.stderr
    after = env_values(env)

    # Keys and every value the user had stay, the lines in place; the pins are this checkout's.
    pins = chosen_pins(host, tmp_path)
    example = example_values()
    for name, value in before.items():
        if name.endswith("_IMAGE"):
            assert after[name] == pins.get(name, example[name])
            if value != after[name]:
                shown = value or "(empty)"
                assert f"stack upgrade: {name}: {shown} -> {after[name] or '(empty)'}" in (
                    result.stderr
                )
        else:
            assert after[name] == value, name
    kept = [line for line in before_text.splitlines() if not re.match(r"^[A-Z_]+_IMAGE=", line)]
    assert [line for line in kept if line not in env.read_text().splitlines()] == []

    # Settings new in .env.example: appended with its defaults (and the pins for this host).
    assert set(after) == set(example)
    for name in set(example) - set(before):
        if name == "LLM_AGENT_KEY":  # the one-key .env: a fresh agent key, never printed
            assert KEY_RE.match(after[name])
            assert after[name] not in KEYS.values()
            assert after[name] not in result.stdout + result.stderr
            assert "added LLM_AGENT_KEY: a fresh key; enter it in Home Assistant" in result.stderr
            continue
        assert after[name] == pins.get(name, example[name])
        assert f"stack upgrade: added {name}={after[name]}\n" in result.stderr
    assert "\n# Added by ./stack upgrade on " in env.read_text()
    assert "# Who may talk to the gateway, on both ports" in env.read_text()  # the comment too
    for key in KEYS.values():
        assert key not in result.stdout + result.stderr

    # The previous file kept, and both readable by the owner only.
    (backup,) = backups(env)
    assert backup.read_text() == before_text
    assert backup.stat().st_mode & 0o777 == 0o600
    assert env.stat().st_mode & 0o777 == 0o600
    assert "was mode 644, now 600" in result.stderr
    assert f"to go back: cp -p {backup} {env}" in result.stderr

    # Then ./stack check, and the next step.
    assert "stack: every image exists" in result.stderr
    assert "now ./stack up -d --build" in result.stderr

    # A second upgrade finds nothing to do.
    again = stack(env, "upgrade", extra_env=host)
    assert again.returncode == 0, again.stderr
    assert "already has this checkout's pins and settings" in again.stderr
    assert " -> " not in again.stderr
    assert "added" not in again.stderr
    assert backups(env) == [backup]


def test_upgrade_keeps_a_pin_of_the_users_own(host: dict[str, str], tmp_path: Path) -> None:
    own = "registry.example.org/kokoro:mine@sha256:" + "12" * 32
    env = old_env(tmp_path / ".env", "c1687ef")
    env.write_text(re.sub(r"^TTS_IMAGE=.*$", f"TTS_IMAGE={own}", env.read_text(), flags=re.M))
    result = stack(env, "upgrade", extra_env=host | {"COMPOSE_PROFILES": "speech"})
    assert result.returncode == 0, result.stderr
    assert env_values(env)["TTS_IMAGE"] == own
    pin = chosen_pins(host, tmp_path)["TTS_IMAGE"]
    assert f"stack upgrade: TTS_IMAGE: kept your own {own} (this checkout's pin: {pin})" in (
        result.stderr
    )


def test_upgrade_names_settings_example_no_longer_has(host: dict[str, str], tmp_path: Path) -> None:
    env = old_env(tmp_path / ".env", "c1687ef", extra="STT_OPENAI_URL=http://old:8000/v1\n")
    result = stack(env, "upgrade", extra_env=host)
    assert result.returncode == 0, result.stderr
    assert (
        "stack upgrade: STT_OPENAI_URL is not in .env.example (your own, or removed or renamed "
        "since): kept as it is"
    ) in result.stderr
    assert env_values(env)["STT_OPENAI_URL"] == "http://old:8000/v1"


def test_upgrade_on_the_cpu(host: dict[str, str], tmp_path: Path) -> None:
    env = old_env(tmp_path / ".env", "c1687ef", extra="STACK_DEVICE=cpu\n")
    result = stack(env, "upgrade", extra_env=host | {"FAKE_RUNTIMES": "{}", "FAKE_GPUS": ""})
    assert result.returncode == 0, result.stderr
    after = env_values(env)
    assert after["STACK_DEVICE"] == "cpu"
    pins = chosen_pins(host, tmp_path, "--cpu")
    assert {name: after[name] for name in pins} == pins


@pytest.mark.parametrize(
    ("nvidia_smi", "message"),
    [
        (True, "'nvidia-smi' fails (exit 9"),
        (False, "STACK_DEVICE is cuda, but no NVIDIA GPU answers nvidia-smi here"),
    ],
    ids=["driver fails", "no nvidia-smi"],
)
def test_upgrade_changes_nothing_when_the_gpu_does_not_answer(
    host: dict[str, str], tmp_path: Path, nvidia_smi: bool, message: str
) -> None:
    """A driver down during the upgrade must not move a GPU host to the CPU images."""
    if not nvidia_smi:
        (Path(host["PATH"].split(":")[0]) / "nvidia-smi").unlink()
    env = old_env(tmp_path / ".env", "c1687ef")
    before = env.read_text()
    result = stack(env, "upgrade", extra_env=host | {"FAKE_GPUS": ""})
    assert result.returncode == 2
    assert message in result.stderr
    assert "nothing changed" in result.stderr
    assert env.read_text() == before
    assert backups(env) == []


def test_upgrade_apply_runs_up_with_build(host: dict[str, str], tmp_path: Path) -> None:
    directory = Path(host["FAKE_DOCKER_LOG"]).parent / "compose-bin"
    compose = stand_in(directory, "compose", COMPOSE_UP_LOGGED.replace("{real}", str(COMPOSE_BIN)))
    env = old_env(tmp_path / ".env", "c1687ef")
    result = stack(env, "upgrade", "--apply", extra_env=host | {"COMPOSE_BIN": str(compose)})
    assert result.returncode == 0, result.stderr
    calls = Path(host["FAKE_DOCKER_LOG"] + ".compose").read_text().splitlines()
    assert calls[-1].endswith(" up -d --build")
    assert "stack upgrade: running ./stack up -d --build" in result.stderr


def test_upgrade_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    result = stack(write_env_file(tmp_path / ".env"), "upgrade", "--force")
    assert result.returncode == 2
    assert "unknown option '--force' (known: --apply)" in result.stderr
    result = stack(None, "upgrade")
    assert result.returncode == 2
    assert "no /nonexistent/.env: run ./stack init" in result.stderr


def shipped_pins() -> set[str]:
    """Every image pin .env.example and stack-gpu.sh's VARIANTS held in any commit."""
    paths = ["compose/.env.example", "compose/stack-gpu.sh"]
    log = subprocess.run(
        ["git", "-C", str(REPO), "log", "--format=%H", "--", *paths],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    pins: set[str] = set()
    for commit in log.stdout.split():
        for path in paths:
            text = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{commit}:{path}"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            ).stdout
            pins |= set(re.findall(r"^[A-Z_]+_IMAGE=(.+)$", text, re.MULTILINE))
            pins |= set(re.findall(r'^  "(?:llm|asr|tts)\|[^|]*\|([^|]+)\|', text, re.MULTILINE))
    return pins


def test_upgrade_knows_every_pin_the_project_shipped() -> None:
    """A pin a user never chose is replaced by ./stack upgrade; any other is kept as theirs. So
    a pin that leaves .env.example or VARIANTS must go into FORMER_PINS."""
    known = subprocess.run(
        [
            "bash",
            "-c",
            'source stack-gpu.sh; source stack-setup.sh; printf "%s\\n" "${FORMER_PINS[@]}"; '
            'for row in "${VARIANTS[@]}"; do IFS="|" read -r _ _ image _ <<<"$row"; echo "$image"; '
            "done",
        ],
        cwd=COMPOSE_DIR,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    current = {v for k, v in example_values().items() if k.endswith("_IMAGE")}
    missing = shipped_pins() - set(known) - current - {""}
    assert not missing, f"add these to FORMER_PINS in compose/stack-setup.sh: {sorted(missing)}"
