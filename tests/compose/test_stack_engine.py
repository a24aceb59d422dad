"""The compose bundle under a real Docker engine, the way a user installs it: `./stack init`,
`./stack check`, `./stack up -d`, then a real Home Assistant speaking through the containers,
restarts and a killed speech server, a config change, and `./stack down`.

No registry is reachable here, so the images that come from elsewhere are stand-ins built on
this machine from Debian packages (voice_stack_dev.standins); the gateway is built by Compose
from its own Dockerfile. The override file this test writes swaps only those images and what
loopback-only networking needs (host networking, listen addresses, in-container URLs);
everything else is the shipped compose.yaml, gpu-less via STACK_DEVICE=cpu as `./stack init
--cpu` writes it, and ./stack itself. The engine runs with its own data root under .cache/,
no bridge and no iptables, and is stopped by PID when the module ends.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.compose.stack_helpers import COMPOSE_DIR
from voice_stack_dev.assist import AssistError, run_utterance
from voice_stack_dev.demo import observe
from voice_stack_dev.demo.ha_config import write_config
from voice_stack_dev.demo.provision import AgentPlan, Setup, onboard_or_login, provision
from voice_stack_dev.demo.services import DemoState
from voice_stack_dev.demo.turns import synthesize_request
from voice_stack_dev.docker_engine import DockerEngine, run
from voice_stack_dev.ha_client import HomeAssistantClient
from voice_stack_dev.paths import MODEL_FILES, MODELS, venv_bin
from voice_stack_dev.procs import Service, free_port, http_status, wait_tcp
from voice_stack_dev.standins import Images, build_images

pytestmark = pytest.mark.usefixtures("socket_enabled")

MODEL = MODEL_FILES["smollm2"]
PROXY, GATEWAY, GATEWAY_HTTP, LLM, ASR, TTS = 11434, 10300, 10301, 8080, 8000, 8880
PORTS = {"llm-auth": PROXY, "gateway": GATEWAY, "gateway http": GATEWAY_HTTP, "llm": LLM,
         "asr": ASR, "tts": TTS}  # fmt: skip
SERVICES = {"llm", "llm-auth", "asr", "tts", "gateway"}
HEALTHY_WITHIN = 600.0  # bounds a wait that ends as soon as the state is reached
QUESTION = "What is the capital of France?"
# What a user sets in .env for these speech servers (the stand-ins serve these names).
USER_SETTINGS = {
    "LLM_MODELS_DIR": str(MODELS),
    "LLM_MODEL_FILE": MODEL,
    "LLM_CTX_PER_SLOT": "4096",
    "LLM_EXTRA_ARGS": "-t 1",  # 2 shared cores: one thread (see the demo's LLAMA_THREADS)
    "ASR_MODEL": "tiny.en",
    "TTS_MODEL": "piper-joe",
    "TTS_VOICE": "joe",
}


def override(images: Images) -> str:
    """Only the stand-in images and what loopback-only host networking needs."""
    loopback = {"network_mode": "host", "ports": "!reset []"}
    services: dict[str, dict[str, Any]] = {
        "llm": {"image": images.llm, "environment": {"LLAMA_ARG_HOST": "127.0.0.1"}},
        "llm-auth": {"image": images.llm_auth, "environment": {
            "LLM_PROXY_LISTEN": f"127.0.0.1:{PROXY}",
            "LLM_UPSTREAM": f"http://127.0.0.1:{LLM}",
            "LLM_PROXY_RESOLVER": "127.0.0.1"}},
        "asr": {"image": images.speech, "environment": {"UVICORN_HOST": "127.0.0.1"}},
        "tts": {"image": images.speech, "environment": {"HOST": "127.0.0.1", "PORT": str(TTS)}},
        "gateway": {"build": {"network": "host"}, "environment": {
            "WYOMING_URI": f"tcp://127.0.0.1:{GATEWAY}",
            "GATEWAY_HTTP_URI": f"tcp://127.0.0.1:{GATEWAY_HTTP}",
            "STT_OPENAI_URL": f"http://127.0.0.1:{ASR}/v1",
            "TTS_OPENAI_URL": f"http://127.0.0.1:{TTS}/v1"}},
    }  # fmt: skip
    lines = ["services:"]
    for name, service in services.items():
        lines.append(f"  {name}:")
        for key, value in (loopback | service).items():
            if isinstance(value, dict):
                lines.append(f"    {key}:")
                lines += [f"      {k}: {json.dumps(v)}" for k, v in value.items()]
            else:
                lines.append(f"    {key}: {value}")
    return "\n".join(lines) + "\n"


@dataclass
class Bundle:
    """The installed bundle: its .env, the engine, and `./stack` as the user runs it."""

    engine: DockerEngine
    env_file: Path
    override: Path
    logs: Path

    def stack(self, *args: str, timeout: float = 900.0, check: bool = True) -> Any:
        env = self.engine.env | {
            "VOICE_STACK_ENV_FILE": str(self.env_file),
            "VOICE_STACK_COMPOSE_FILES": str(self.override),
        }
        result = run([str(COMPOSE_DIR / "stack"), *args], env, check=False, timeout=timeout)
        with (self.logs / "stack.log").open("a") as log:
            log.write(f"$ ./stack {' '.join(args)}\n{result.stdout}{result.stderr}\n")
        assert not check or result.returncode == 0, f"./stack {args}: {result.stderr}"
        return result

    def containers(self) -> dict[str, dict[str, Any]]:
        """`docker compose ps -a` by service: id, state and health."""
        out = self.stack("ps", "-a", "--format", "json").stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        return {row["Service"]: row for row in rows}

    def wait_healthy(self, services: set[str] = SERVICES) -> None:
        deadline = time.monotonic() + HEALTHY_WITHIN
        while time.monotonic() < deadline:
            rows = self.containers()
            if all(rows.get(s, {}).get("Health") == "healthy" for s in services):
                return
            time.sleep(1)
        raise AssertionError(f"not healthy in time: {self.containers()}\n{self.logs_of(services)}")

    def logs_of(self, services: set[str]) -> str:
        return str(self.stack("logs", "--tail", "30", *sorted(services), check=False).stdout)

    def set_env(self, name: str, value: str) -> None:
        text = self.env_file.read_text()
        self.env_file.write_text(re.sub(rf"^{name}=.*$", f"{name}={value}", text, flags=re.M))


@pytest.fixture(scope="module")
def engine(service_logs: Path) -> Iterator[DockerEngine]:
    busy = [f"{name} ({port})" for name, port in PORTS.items() if wait_tcp(port, timeout=0.1)]
    assert not busy, f"the bundle's ports are taken on this machine: {', '.join(busy)}"
    docker = DockerEngine(service_logs / "dockerd.log").start()
    try:
        yield docker
    finally:
        docker.stop()


@pytest.fixture(scope="module")
def bundle(
    engine: DockerEngine, tmp_path_factory: pytest.TempPathFactory, service_logs: Path
) -> Iterator[Bundle]:
    """`./stack init --cpu`, the user's settings, `./stack check`, `./stack up -d`: healthy."""
    home = tmp_path_factory.mktemp("compose")
    images = build_images(engine)
    (home / "test.override.yaml").write_text(override(images))
    setup = Bundle(engine, home / ".env", home / "test.override.yaml", service_logs)
    setup.init = setup.stack("init", "--cpu")  # type: ignore[attr-defined]
    for name, value in USER_SETTINGS.items():
        setup.set_env(name, value)
    try:
        yield setup
    finally:
        setup.stack("down", "--volumes", "--timeout", "5", check=False)


@pytest.fixture(scope="module")
def installed(bundle: Bundle) -> Bundle:
    bundle.check = bundle.stack("check")  # type: ignore[attr-defined]
    bundle.up = bundle.stack("up", "-d")  # type: ignore[attr-defined]
    bundle.wait_healthy()
    return bundle


@dataclass
class Home:
    """A real Home Assistant set up through its own APIs against the containers."""

    url: str
    state: DemoState
    setup: Setup
    request_pcm: bytes


def env_values(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"^[A-Z_]+=", line))


@pytest.fixture(scope="module")
def home(
    installed: Bundle, tmp_path_factory: pytest.TempPathFactory, service_logs: Path
) -> Iterator[Home]:
    keys = env_values(installed.env_file)
    state = DemoState(llama_key=keys["LLM_API_KEY"], proxy_key=keys["LLM_PROXY_KEY"],
                      agent_key=keys["LLM_AGENT_KEY"])  # fmt: skip
    config = tmp_path_factory.mktemp("ha-config")
    port = free_port()
    write_config(config, port, http_block=True)
    hass = Service(name="Home Assistant", argv=[str(venv_bin("ha11", "hass")), "-c", str(config),
                   "--skip-pip"], port=port, log_path=service_logs / "compose-hass.log",
                   health_path="/manifest.json", startup_timeout=180.0).start()  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        plan = AgentPlan(MODEL, tool_calling=False, control=False, commands_to_agent=True)

        async def set_up() -> Setup:
            async with HomeAssistantClient(url) as ha:
                return await provision(
                    ha, state, plan, hass_port=port, proxy_url=f"http://127.0.0.1:{PROXY}",
                    gateway_port=GATEWAY, gateway_http_url=f"http://127.0.0.1:{GATEWAY_HTTP}",
                )  # fmt: skip

        setup = asyncio.run(set_up())
        write_config(config, port, http_block=False)
        pcm = asyncio.run(
            synthesize_request(f"http://127.0.0.1:{TTS}", QUESTION, str(hass.log_path))
        )
        yield Home(url, state, setup, pcm)
    finally:
        hass.stop()


async def speak(home: Home) -> tuple[Any, int | None]:
    """The request through HA's pipeline: the run, and the slot that served the agent."""
    async with HomeAssistantClient(home.url) as ha:
        await onboard_or_login(ha, home.state)
        await ha.connect_ws()
        voice = await run_utterance(ha, home.setup.pipeline_id, home.request_pcm)
    slots = await observe.llama_slots(f"http://127.0.0.1:{PROXY}", home.state.agent_key)
    return voice, observe.last_used_slot(slots)


def test_init_check_and_up_on_a_real_engine(installed: Bundle) -> None:
    assert "choosing the CPU images" not in installed.init.stderr  # type: ignore[attr-defined]
    assert env_values(installed.env_file)["STACK_DEVICE"] == "cpu"
    check = installed.check.stderr  # type: ignore[attr-defined]
    assert "host and image checks skipped" not in check
    assert "every image exists" in check
    assert "knows every flag" in check
    rows = installed.containers()
    assert set(rows) == SERVICES
    assert {row["Health"] for row in rows.values()} == {"healthy"}
    assert http_status(f"http://127.0.0.1:{PROXY}/proxy/status") == 200


def test_home_assistant_speaks_through_the_containers(home: Home, service_logs: Path) -> None:
    voice, slot = asyncio.run(speak(home))
    # What a CPU-only box gives (docs/deploy.md quotes it): kept with the logs, never asserted.
    (service_logs / "compose-voice-timings.json").write_text(repr(voice.timings))
    assert "france" in voice.transcript.lower()
    assert not voice.processed_locally
    assert voice.reply_type != "error", voice.reply
    assert voice.reply.strip()
    assert voice.audio, "no reply audio from the containerised TTS"
    assert slot == 0  # the agent's reserved slot, through the containerised proxy


def agent_slot_primed(agent_key: str) -> bool:
    slots = asyncio.run(observe.llama_slots(f"http://127.0.0.1:{PROXY}", agent_key))
    slot = next((s for s in slots if s.get("id") == 0), {})
    return int(slot.get("id_task", -1)) >= 0


def test_a_restarted_llm_gets_the_agent_slot_warm_again(
    installed: Bundle, home: Home, service_logs: Path
) -> None:
    installed.stack("restart", "llm")
    installed.wait_healthy({"llm"})
    healthy = time.monotonic()
    # A fresh process: slot 0 has run nothing until the integration primes it (it polls every
    # 15 s); no user request is sent meanwhile.
    deadline = healthy + HEALTHY_WITHIN
    while not agent_slot_primed(home.state.agent_key):
        assert time.monotonic() < deadline, "the agent's slot was not primed after the restart"
        time.sleep(1)
    # How long after the container turned healthy (kept with the logs, never asserted).
    (service_logs / "compose-llm-restart.json").write_text(
        json.dumps({"primed_after_healthy_s": round(time.monotonic() - healthy, 1)})
    )
    voice, slot = asyncio.run(speak(home))
    assert voice.reply_type != "error", voice.reply
    assert slot == 0


def test_a_killed_asr_is_a_clear_error_then_recovers(installed: Bundle, home: Home) -> None:
    installed.stack("kill", "asr")
    with pytest.raises(AssistError) as failure:
        asyncio.run(speak(home))
    assert failure.value.code.startswith("stt-")
    assert failure.value.args  # HA shows the gateway's message, not a hang
    installed.stack("start", "asr")
    installed.wait_healthy({"asr"})
    voice, _ = asyncio.run(speak(home))
    assert "france" in voice.transcript.lower()


def test_a_config_change_recreates_only_what_changed(installed: Bundle) -> None:
    before = {name: row["ID"] for name, row in installed.containers().items()}
    installed.set_env("GATEWAY_LOG_LEVEL", "DEBUG")
    installed.stack("up", "-d")
    installed.wait_healthy()
    after = {name: row["ID"] for name, row in installed.containers().items()}
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"gateway"}


def test_down_leaves_nothing_but_the_named_volumes(installed: Bundle, home: Home) -> None:
    volumes_before = set(installed.engine.docker("volume", "ls", "-q").stdout.split())
    down = installed.stack("down")
    assert "./stack purge removes all but .env" in down.stderr
    project = "label=com.docker.compose.project=voice-stack"
    assert installed.engine.docker("ps", "-aq", "--filter", project).stdout.split() == []
    assert installed.engine.docker("network", "ls", "-q", "--filter", project).stdout.split() == []
    volumes = set(installed.engine.docker("volume", "ls", "-q").stdout.split())
    assert volumes == {"voice-stack_llm-slots", "voice-stack_hf-hub-cache"}
    assert volumes == volumes_before  # no anonymous volume was ever left


def test_purge_removes_the_volumes_and_the_image_built_here(installed: Bundle) -> None:
    """Compose's own `down --rmi local` leaves the gateway's image (it has an image: key)."""
    built = "voice-stack-gateway:local"
    assert installed.engine.docker("image", "inspect", built, check=False).returncode == 0
    purge = installed.stack("purge")
    assert f"the images built here ({built})" in purge.stderr
    assert installed.engine.docker("image", "inspect", built, check=False).returncode != 0
    volumes = set(installed.engine.docker("volume", "ls", "-q").stdout.split())
    assert not volumes & {"voice-stack_llm-slots", "voice-stack_hf-hub-cache"}
