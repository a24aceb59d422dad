"""compose/stack-gpu.sh: which image variant runs on which driver and card. `./stack init` picks
the variants for the host it runs on, `./stack check` refuses what cannot run; the hosts are
stand-in nvidia-smi programs (this machine has no GPU), Compose is the real binary."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.compose.stack_helpers import stack, stand_in_host, write_env_file

NVIDIA = '{"nvidia":{"path":"nvidia-container-runtime"}}'
LLAMA_CUDA = "ghcr.io/ggml-org/llama.cpp:server-cuda-b11347@sha256:"
LLAMA_CPU = "ghcr.io/ggml-org/llama.cpp:server-b11347"
SPEACHES_129 = "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda@sha256:"
SPEACHES_126 = "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda-12.6.3@sha256:"
SPEACHES_CPU = "ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cpu@sha256:"
KOKORO_126 = "ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0@sha256:"
KOKORO_128 = "ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0-cu128"
KOKORO_CPU = "ghcr.io/remsky/kokoro-fastapi-cpu:v0.9.0@sha256:"

# The common hosts: what nvidia-smi --query-gpu=name,driver_version,compute_cap prints.
HOSTS = {
    "RTX 3060, driver 560": "NVIDIA GeForce RTX 3060, 560.35.03, 8.6",
    "RTX 4090, driver 570": "NVIDIA GeForce RTX 4090, 570.211.01, 8.9",
    "RTX 4090, driver 575": "NVIDIA GeForce RTX 4090, 575.64.03, 8.9",
    "RTX 5090, driver 575": "NVIDIA GeForce RTX 5090, 575.57.08, 12.0",
    "A100, driver 535": "NVIDIA A100-SXM4-80GB, 535.183.01, 8.0",
    "RTX 3090 + RTX 5080, driver 580": (
        "NVIDIA GeForce RTX 3090, 580.82.07, 8.6;NVIDIA GeForce RTX 5080, 580.82.07, 12.0"
    ),
}
# What ./stack init writes for each: (llm, asr, tts) image prefixes.
CHOICES = {
    "RTX 3060, driver 560": None,  # llama.cpp's CUDA 12.8 image needs 570 on GeForce
    "RTX 4090, driver 570": (LLAMA_CUDA, SPEACHES_126, KOKORO_126),
    "RTX 4090, driver 575": (LLAMA_CUDA, SPEACHES_129, KOKORO_126),
    "RTX 5090, driver 575": (LLAMA_CUDA, SPEACHES_129, KOKORO_128),
    "A100, driver 535": (LLAMA_CUDA, SPEACHES_129, KOKORO_126),
    "RTX 3090 + RTX 5080, driver 580": (LLAMA_CUDA, SPEACHES_129, KOKORO_128),
}


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    return stand_in_host(
        tmp_path, {"FAKE_ENGINE": "28.5.2", "FAKE_BUILDX": "0.29.1", "FAKE_RUNTIMES": NVIDIA}
    )


def env_values(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if re.match(r"^[A-Z_]+=", line))


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_init_picks_the_variants_that_fit(host: dict[str, str], tmp_path: Path, name: str) -> None:
    env = tmp_path / ".env"
    result = stack(env, "init", extra_env=host | {"FAKE_GPUS": HOSTS[name]})
    expected = CHOICES[name]
    if expected is None:
        assert result.returncode == 2
        assert (
            "llm: no image fits this host: not llama.cpp b11347, CUDA 12.8: driver 560.35.03"
            in (result.stderr)
        )
        assert "./stack init --cpu" in result.stderr
        assert not env.exists()
        return
    assert result.returncode == 0, result.stderr
    values = env_values(env)
    assert values["STACK_DEVICE"] == "cuda"
    chosen = (values["LLM_IMAGE"], values["ASR_IMAGE"], values["TTS_IMAGE"])
    assert all(image.startswith(prefix) for image, prefix in zip(chosen, expected, strict=True))
    for line in HOSTS[name].split(";"):
        assert f"found {line.split(',')[0]}" in result.stderr


def test_init_says_why_it_passed_a_variant_over(host: dict[str, str], tmp_path: Path) -> None:
    result = stack(
        tmp_path / ".env", "init", extra_env=host | {"FAKE_GPUS": HOSTS["RTX 5090, driver 575"]}
    )
    assert (
        "tts: Kokoro-FastAPI v0.9.0, CUDA 12.8 (not Kokoro-FastAPI v0.9.0, CUDA 12.6: it has no "
        "GPU code for NVIDIA GeForce RTX 5090 (compute capability 12.0" in result.stderr
    )
    result = stack(
        tmp_path / "b.env", "init", extra_env=host | {"FAKE_GPUS": HOSTS["RTX 4090, driver 570"]}
    )
    assert (
        "asr: speaches 0.9.0-rc.3, CUDA 12.6 (not speaches 0.9.0-rc.3, CUDA 12.9: driver "
        "570.211.01 on NVIDIA GeForce RTX 4090 is older than 575" in result.stderr
    )


def without_nvidia_smi(host: dict[str, str]) -> dict[str, str]:
    """A host with no NVIDIA driver at all: the stand-in nvidia-smi taken off PATH."""
    bin_dir = Path(host["PATH"].split(":")[0])
    (bin_dir / "nvidia-smi").unlink()
    assert shutil.which("nvidia-smi", path=host["PATH"]) is None
    return host


@pytest.mark.parametrize("cpu", [False, True], ids=["no nvidia-smi", "--cpu"])
def test_init_without_a_gpu_writes_the_cpu_variant(
    host: dict[str, str], tmp_path: Path, cpu: bool
) -> None:
    env = tmp_path / ".env"
    if cpu:
        result = stack(
            env, "init", "--cpu", extra_env=host | {"FAKE_GPUS": HOSTS["A100, driver 535"]}
        )
    else:
        result = stack(env, "init", extra_env=without_nvidia_smi(host))
        assert "no NVIDIA GPU answers 'nvidia-smi': choosing the CPU images" in result.stderr
    assert result.returncode == 0, result.stderr
    values = env_values(env)
    assert values["STACK_DEVICE"] == "cpu"
    assert values["LLM_IMAGE"] == LLAMA_CPU
    assert values["ASR_IMAGE"].startswith(SPEACHES_CPU)
    assert values["TTS_IMAGE"].startswith(KOKORO_CPU)
    # What docs/deploy.md recommends on a CPU, not .env.example's GPU values.
    assert values["LLM_GPU_LAYERS"] == "0"
    assert values["ASR_MODEL"] == "Systran/faster-whisper-small.en"
    assert re.fullmatch(r'"-t [1-9][0-9]*"', values["LLM_EXTRA_ARGS"])


def test_the_image_comments_fit_whichever_variant_init_wrote(
    host: dict[str, str], tmp_path: Path
) -> None:
    """The comment above each image line describes every variant, not only the GPU default."""
    env = tmp_path / ".env"
    assert stack(env, "init", "--cpu", extra_env=host).returncode == 0
    lines = env.read_text().splitlines()
    for key in ("LLM_IMAGE", "ASR_IMAGE", "TTS_IMAGE"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}="))
        start = at
        while lines[start - 1].startswith("#"):
            start -= 1
        comment = " ".join(line.lstrip("# ") for line in lines[start:at])
        assert comment.startswith("Image: "), key
        assert "./stack init writes the variant for this host" in comment, key
        assert "on the CPU" in comment, key


def test_init_on_a_gpu_keeps_the_gpu_settings(host: dict[str, str], tmp_path: Path) -> None:
    env = tmp_path / ".env"
    gpus = {"FAKE_GPUS": HOSTS["RTX 4090, driver 575"]}
    assert stack(env, "init", extra_env=host | gpus).returncode == 0
    values = env_values(env)
    assert (values["LLM_GPU_LAYERS"], values["LLM_EXTRA_ARGS"]) == ("999", "")
    assert values["ASR_MODEL"] == "Systran/faster-distil-whisper-large-v3"


FAILED_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


@pytest.mark.parametrize("command", [["init"], ["variants"], ["check"]], ids=str)
def test_a_failing_driver_is_refused_with_its_own_error(
    host: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    """nvidia-smi there but failing (a kernel update without DKMS) is not "no GPU": no CPU
    images are written behind the user's back."""
    env = tmp_path / ".env"
    if command == ["check"]:
        write_env_file(env)
    result = stack(env, *command, extra_env=host | {"FAKE_GPUS": "", "COMPOSE_PROFILES": "speech"})
    assert result.returncode == 2
    assert f"'nvidia-smi' fails (exit 9: {FAILED_DRIVER})" in result.stderr
    assert "reinstall or rebuild it for the running kernel" in result.stderr
    assert "then reboot" in result.stderr
    assert "choosing the CPU images" not in result.stderr
    if command == ["check"]:
        assert "./stack variants --cpu prints the lines to put in .env" in result.stderr
    else:
        assert "To choose the CPU images deliberately: ./stack init --cpu" in result.stderr
        assert not env.exists()


def test_the_cpu_variant_reserves_no_gpu_and_needs_no_nvidia(
    host: dict[str, str], tmp_path: Path
) -> None:
    env = tmp_path / ".env"
    assert stack(env, "init", "--cpu", extra_env=host).returncode == 0
    filled = write_env_file(tmp_path / "filled.env")
    text = filled.read_text() + "".join(
        f"{k}={v}\n"
        for k, v in env_values(env).items()
        if k.endswith("_IMAGE") or k == "STACK_DEVICE"
    )
    filled.write_text(text)
    files = stack(filled, "files", extra_env=host).stdout.split()
    assert not [f for f in files if f.endswith("gpu.yaml")]
    no_nvidia = host | {
        "FAKE_RUNTIMES": "{}",
        "FAKE_GPUS": "",
        "COMPOSE_PROFILES": "speech,gateway",
    }
    result = stack(filled, "check", extra_env=no_nvidia)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("gpus", "images", "message"),
    [
        (
            HOSTS["RTX 4090, driver 570"],
            {},
            "asr: ghcr.io/speaches-ai/speaches:0.9.0-rc.3-cuda@sha256:",
        ),
        (
            HOSTS["RTX 5090, driver 575"],
            {},
            "tts: ghcr.io/remsky/kokoro-fastapi-gpu:v0.9.0@sha256:",
        ),
        (HOSTS["RTX 3060, driver 560"], {"ASR_IMAGE": SPEACHES_126 + "5c" * 32}, "llm: "),
        ("", {}, "'nvidia-smi' fails (exit 9"),
    ],
    ids=["speaches CUDA 12.9 on 570", "Kokoro cu126 on Blackwell", "llama.cpp on 560", "no driver"],
)
def test_check_refuses_what_the_gpu_cannot_run(
    host: dict[str, str], tmp_path: Path, gpus: str, images: dict[str, str], message: str
) -> None:
    env = write_env_file(tmp_path / ".env")
    extra = host | {"FAKE_GPUS": gpus, "COMPOSE_PROFILES": "speech"} | images
    result = stack(env, "check", extra_env=extra)
    assert result.returncode == 2
    assert message in result.stderr
    assert "this host is not ready for ./stack up" in result.stderr


def test_check_names_the_command_that_prints_what_fits(
    host: dict[str, str], tmp_path: Path
) -> None:
    """`./stack init` refuses once .env exists, and there is no --print-images."""
    env = write_env_file(tmp_path / ".env")
    gpus = {"FAKE_GPUS": HOSTS["RTX 4090, driver 570"], "COMPOSE_PROFILES": "speech"}
    result = stack(env, "check", extra_env=host | gpus)
    assert result.returncode == 2
    assert "./stack variants prints the lines that fit this host: put its ASR_IMAGE line" in (
        result.stderr
    )
    assert "--print-images" not in result.stderr
    result = stack(env, "check", extra_env=without_nvidia_smi(host) | gpus)
    assert result.returncode == 2
    assert "no NVIDIA GPU answers 'nvidia-smi' on this host" in result.stderr
    assert "./stack variants --cpu prints the lines to put in .env" in result.stderr


def test_check_passes_the_variants_init_chose(host: dict[str, str], tmp_path: Path) -> None:
    gpus = {"FAKE_GPUS": HOSTS["RTX 5090, driver 575"]}
    chosen = tmp_path / "chosen.env"
    assert stack(chosen, "init", extra_env=host | gpus).returncode == 0
    env = write_env_file(tmp_path / ".env")
    images = {
        k: v for k, v in env_values(chosen).items() if k.endswith("_IMAGE") and k != "GATEWAY_IMAGE"
    }
    result = stack(env, "check", extra_env=host | gpus | images | {"COMPOSE_PROFILES": "speech"})
    assert result.returncode == 0, result.stderr


def test_variants_prints_without_writing(host: dict[str, str], tmp_path: Path) -> None:
    env = tmp_path / ".env"
    result = stack(env, "variants", extra_env=host | {"FAKE_GPUS": HOSTS["RTX 4090, driver 575"]})
    assert result.returncode == 0, result.stderr
    assert f"LLM_IMAGE={LLAMA_CUDA}" in result.stdout
    assert not env.exists()


def test_variants_refuses_an_unknown_option(host: dict[str, str], tmp_path: Path) -> None:
    result = stack(tmp_path / ".env", "variants", "--gpu", extra_env=host)
    assert result.returncode == 2
    assert "unknown option '--gpu' (known: --cpu)" in result.stderr
    assert result.stdout == ""


def test_variants_on_the_cpu_prints_the_cpu_settings_too(
    host: dict[str, str], tmp_path: Path
) -> None:
    result = stack(tmp_path / ".env", "variants", "--cpu", extra_env=host)
    assert result.returncode == 0, result.stderr
    assert f"LLM_IMAGE={LLAMA_CPU}" in result.stdout
    assert "LLM_GPU_LAYERS=0" in result.stdout.splitlines()
