"""compose/vram.py, the GPU memory check of ./stack check and ./stack init: its header arithmetic
held against what the real llama-server (b11669) reports for the same GGUF and flags, its GGUF
reader against gguf-py's, and ./stack on stand-in GPUs (stack_helpers: stand-in nvidia-smi)."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import gguf
import pytest

from tests.compose.gguf_models import (
    COHERE2,
    GEMMA2,
    GEMMA3,
    GPT_OSS,
    LLAMA3_8B,
    QWEN3,
    write_header_only,
    write_model,
)
from tests.compose.stack_helpers import COMPOSE_DIR, stack, stand_in_host, write_env_file
from voice_stack_dev.llama import LlamaServer
from voice_stack_dev.paths import model_path


def _load_vram() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vram", COMPOSE_DIR / "vram.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["vram"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


vram = _load_vram()
MIB = 1 << 20
ARCHS = {"gemma3": GEMMA3, "gemma2": GEMMA2, "gpt-oss": GPT_OSS, "cohere2": COHERE2, "qwen3": QWEN3}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A model by name: the provisioned ones (smollm2, tiny-text), the small models of each
    architecture in ARCHS, and "qwen3-split" (qwen3 in three files)."""
    folder = tmp_path_factory.mktemp("gguf")
    written: dict[str, Path] = {}

    def path(name: str) -> Path:
        if name in ("smollm2", "tiny-text", "tiny-tool"):
            return model_path(name)
        if name not in written:
            arch = name.removesuffix("-split")
            split = 20 if arch != name else 0
            written[name] = write_model(
                folder / f"{name}.gguf", ARCHS[arch], split_max_tensors=split
            )
        return written[name]

    return path


def reported(log: str) -> dict[str, float]:
    """llama-server's own figures (MiB) from its log at -lv 4: the model buffers, the KV cache
    (one line per cache: the full and the sliding-window one), the compute buffer."""

    def total(pattern: str) -> float:
        return sum(float(m) for m in re.findall(pattern, log))

    return {
        "weights": total(r"model buffer size =\s+([\d.]+) MiB"),
        "kv": total(r"llama_kv_cache: size =\s+([\d.]+) MiB"),
        "compute": total(r"compute buffer size =\s+([\d.]+) MiB"),
    }


# Each: model, LLM_PARALLEL, LLM_CTX_PER_SLOT, more llama-server flags (as LLM_EXTRA_ARGS).
AGAINST_LLAMA = {
    "llama (SmolLM2 Q4_1), 4 x 4096": ("smollm2", 4, 4096, ()),
    "llama, 3 x 1000 (padded to 1024 cells)": ("tiny-text", 3, 1000, ()),
    "gemma3 Q8_0, window 512 on 5 of 6 layers": ("gemma3", 4, 4096, ()),
    "gemma3, --kv-unified (one window for all slots)": ("gemma3", 4, 4096, ("--kv-unified",)),
    "gemma2, window 1024 on every other layer, no flash attention": (
        "gemma2",
        2,
        3000,
        ("-fa", "off"),
    ),
    "gpt-oss MoE, window 128, q4_0 KV": ("gpt-oss", 4, 2048, ("-ctk", "q4_0", "-ctv", "q4_0")),
    "cohere2, window 1024 on 3 of 4 layers, --swa-full": ("cohere2", 2, 8192, ("--swa-full",)),
    "qwen3 (key_length != n_embd / n_head), q8_0 KV, -ub 256": (
        "qwen3",
        4,
        1024,
        ("-ctk", "q8_0", "-ctv", "q8_0", "-ub", "256"),
    ),
    "qwen3 split in three files": ("qwen3-split", 2, 2048, ()),
}


@pytest.mark.parametrize("case", AGAINST_LLAMA)
def test_the_arithmetic_matches_llama_server(
    case: str, models: Callable[[str], Path], llama_factory: Callable[..., LlamaServer]
) -> None:
    name, parallel, ctx, extra = AGAINST_LLAMA[case]
    flags = ["--no-kv-unified", *extra]  # compose's own flag, then LLM_EXTRA_ARGS
    server = llama_factory(
        str(models(name)), n_parallel=parallel, ctx_per_slot=ctx, extra_args=[*flags, "-lv", "4"]
    )
    theirs = reported(server.log_path.read_text())
    model = vram.load_model(models(name))
    setup = vram.apply_args(vram.Setup(parallel, ctx), flags)
    ours = {
        "weights": model.weights / MIB,
        "kv": vram.kv_bytes(model, setup, setup.type_k, setup.type_v) / MIB,
        "compute": vram.compute_bytes(model, setup) / MIB,
    }
    assert ours["weights"] == pytest.approx(theirs["weights"], rel=0.10, abs=0.02)
    assert ours["kv"] == pytest.approx(theirs["kv"], rel=0.10)
    assert ours["compute"] >= theirs["compute"], "the compute allowance is below llama-server's"


def test_the_reader_agrees_with_gguf_py(models: Callable[[str], Path]) -> None:
    for path in [models(n) for n in ("smollm2", "tiny-text", *ARCHS)]:
        ours = vram.read_gguf(path)
        theirs = gguf.GGUFReader(path)
        assert ours.tensors == {t.name: int(t.n_bytes) for t in theirs.tensors}
        for key, field in theirs.fields.items():
            if key.startswith("GGUF."):
                continue
            value = ours.meta[key]
            if field.types[0] != gguf.GGUFValueType.ARRAY:
                assert value == pytest.approx(field.contents()), key
            elif isinstance(value, vram.Counted):
                assert value.length == len(field.data), key
            else:
                assert value == field.contents(), key


def test_the_type_table_is_ggmls() -> None:
    ggml = {int(t): size for t, size in gguf.GGML_QUANT_SIZES.items()}
    assert ggml == vram.GGML_TYPES
    for name, size in vram.KV_TYPES.items():
        assert gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name.upper()]] == size


def test_a_broken_file_says_what_is_wrong(tmp_path: Path, models: Callable[[str], Path]) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(vram.GgufError, match="not a GGUF file"):
        vram.read_gguf(text)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(models("smollm2").read_bytes()[:100_000])  # inside the vocabulary
    with pytest.raises(vram.GgufError, match="an incomplete download"):
        vram.read_gguf(cut)
    split = models("qwen3-split")
    lonely = tmp_path / split.name
    lonely.write_bytes(split.read_bytes())
    with pytest.raises(vram.GgufError, match=r"other files are missing: .*-00002-of-00003"):
        vram.load_model(lonely)


def test_llama_server_flags_are_read_the_way_it_reads_them() -> None:
    base = vram.Setup(4, 8192)
    setup = vram.apply_args(
        base, ["-fa", "--cache-type-k=q8_0", "-ctv", "q4_0", "-ngl", "20", "-ub", "1024", "-kvu"]
    )
    assert (setup.flash_attn, setup.type_k, setup.type_v) == ("on", "q8_0", "q4_0")
    assert (setup.gpu_layers, setup.ubatch, setup.kv_unified, setup.caveats) == (20, 1024, True, ())
    assert vram.apply_args(base, ["-fa", "off", "-fa", "auto"]).flash_attn == "auto"
    assert vram.apply_args(base, ["-ngl", "auto"]).caveats == (
        "-ngl auto: llama-server fits the layers itself",
    )
    assert (
        "--n-cpu-moe moves parts off the GPU"
        in vram.apply_args(base, ["--n-cpu-moe", "8"]).caveats[0]
    )
    with pytest.raises(ValueError, match="-ctk q3: not a KV cache type"):
        vram.apply_args(base, ["-ctk", "q3"])


def test_partial_offload_counts_the_last_layers(tmp_path: Path) -> None:
    model = vram.load_model(write_header_only(tmp_path / "llama3.gguf", **LLAMA3_8B))
    setup = vram.Setup(1, 4096)
    layer, kv_all = model.layer_bytes[0], vram.kv_bytes(model, setup, "f16", "f16")
    # llama.cpp offloads the last -ngl of the 32 + 1 layers; the output layer is the + 1
    assert vram.weights_on_gpu(model, 33) == 32 * layer + model.output_bytes
    assert vram.weights_on_gpu(model, 11) == 10 * layer + model.output_bytes
    assert vram.weights_on_gpu(model, 0) == 0
    assert vram.kv_bytes(model, setup, "f16", "f16", 11) == kv_all * 10 // 32
    assert kv_all == 4096 * 32 * 2 * 8 * 128 * 2  # cells x layers x (K, V) x heads x dim x f16


# --- ./stack check and ./stack init on stand-in GPUs ------------------------------------------

NVIDIA = '{"nvidia":{"path":"nvidia-container-runtime"}}'
RTX_3060 = "NVIDIA GeForce RTX 3060"  # 12 GB
GPU = f"{RTX_3060}, 575.64.03, 8.6"  # a driver every default image runs on


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """A host with one RTX 3060 and a Llama-3-8B-shaped model (its header only), 4 x 8192 tokens:
    4.06 GiB of weights on the GPU and 4 GiB of KV cache."""
    folder = tmp_path / "models"
    folder.mkdir()
    write_header_only(folder / "llama3-8b.gguf", **LLAMA3_8B)
    fakes = {"FAKE_ENGINE": "28.5.2", "FAKE_BUILDX": "0.29.1", "FAKE_RUNTIMES": NVIDIA}
    return stand_in_host(tmp_path, fakes) | {
        "FAKE_GPUS": GPU,
        "FAKE_GPU_MEMORY": f"{RTX_3060}, 12288",
        "LLM_MODELS_DIR": str(folder),
        "LLM_MODEL_FILE": "llama3-8b.gguf",
        "COMPOSE_PROFILES": "speech,gateway",
    }


def test_check_refuses_a_set_that_cannot_fit(host: dict[str, str], tmp_path: Path) -> None:
    result = stack(write_env_file(tmp_path / ".env"), "check", extra_env=host)
    assert result.returncode == 2
    err = result.stderr
    assert "this set needs about 13.05 GiB of GPU memory, this host has 12.00 GiB" in err
    assert f"({RTX_3060}: 12288 MiB)" in err
    assert re.search(r"llm weights +4\.06 GiB +llama3-8b.gguf, 33 of 33 layers on the GPU", err)
    assert re.search(r"llm KV cache +4\.00 GiB +4 slots x 8192 tokens, f16 K and V, 32 layers", err)
    assert re.search(r"asr +2\.35 GiB +Systran/faster-distil-whisper-large-v3", err)
    assert re.search(r"tts +1\.50 GiB +Kokoro-82M", err)
    assert "LLM_CTX_PER_SLOT=5888 (or less) with LLM_PARALLEL=4" in err
    assert "LLM_PARALLEL=2 with LLM_CTX_PER_SLOT=8192" in err
    assert 'LLM_EXTRA_ARGS="-ctk q8_0 -ctv q8_0": the KV cache in 2.12 GiB (fits;' in err
    assert "a smaller quant or model (the weights take 4.06 GiB)" in err
    assert "do not fit this host's GPU memory" in err
    assert "every image exists" not in err  # refused before anything else is asked


@pytest.mark.parametrize(
    "settings",
    [
        {"LLM_CTX_PER_SLOT": "5888"},
        {"LLM_EXTRA_ARGS": "-ctk q8_0 -ctv q8_0"},
        {"FAKE_GPU_MEMORY": f"{RTX_3060}, 12288;NVIDIA GeForce RTX 3090, 24576"},
        {"COMPOSE_PROFILES": "gateway"},  # the speech servers run elsewhere
    ],
    ids=["the proposed context", "q8_0 KV cache", "a second GPU", "no speech servers"],
)
def test_check_passes_what_fits(
    host: dict[str, str], tmp_path: Path, settings: dict[str, str]
) -> None:
    result = stack(write_env_file(tmp_path / ".env"), "check", extra_env=host | settings)
    assert result.returncode == 0, result.stderr
    assert re.search(r"GPU memory: this set needs about [\d.]+ GiB of [\d.]+ GiB", result.stderr)


def test_check_skips_with_one_line_where_it_cannot_tell(
    host: dict[str, str], tmp_path: Path
) -> None:
    env = write_env_file(tmp_path / ".env")
    for settings, why in [
        ({"STACK_DEVICE": "cpu"}, "STACK_DEVICE=cpu"),
        ({"FAKE_GPU_MEMORY": ""}, "nvidia-smi reports no GPU memory"),
        ({"VOICE_STACK_PYTHON": "no-such-python3"}, "no no-such-python3 on this host"),
        ({"VOICE_STACK_SKIP_VRAM_CHECK": "1"}, "VOICE_STACK_SKIP_VRAM_CHECK is set"),
    ]:
        result = stack(env, "check", extra_env=host | settings)
        assert f"stack: GPU memory check skipped: {why}\n" in result.stderr
        assert "do not fit" not in result.stderr


def test_check_refuses_a_file_that_is_no_model(host: dict[str, str], tmp_path: Path) -> None:
    (Path(host["LLM_MODELS_DIR"]) / "notes.gguf").write_text("not a model")
    env = write_env_file(tmp_path / ".env")
    result = stack(env, "check", extra_env=host | {"LLM_MODEL_FILE": "notes.gguf"})
    assert result.returncode == 2
    assert "notes.gguf: not a GGUF file" in result.stderr


def test_a_rough_estimate_warns_and_does_not_refuse(host: dict[str, str], tmp_path: Path) -> None:
    env = write_env_file(tmp_path / ".env")
    result = stack(env, "check", extra_env=host | {"LLM_EXTRA_ARGS": "--n-cpu-moe 8"})
    assert result.returncode == 0, result.stderr
    assert "GPU memory estimate: --n-cpu-moe moves parts off the GPU" in result.stderr
    assert "this set needs about 13.05 GiB" in result.stderr
    assert "not refused, since the estimate is rough" in result.stderr


def test_init_proposes_the_context_that_fits(host: dict[str, str], tmp_path: Path) -> None:
    env = tmp_path / ".env"
    result = stack(env, "init", extra_env=host)
    assert result.returncode == 0, result.stderr
    found = re.search(
        r"up to LLM_CTX_PER_SLOT=(\d+) fits: set it in .env \(it is 8192\)", result.stderr
    )
    assert found, result.stderr
    proposed = int(found[1])
    assert proposed == 5888
    values: dict[str, Any] = {"LLM_CTX_PER_SLOT": str(proposed)}
    assert stack(env, "check", extra_env=host | values).returncode == 0
    values["LLM_CTX_PER_SLOT"] = str(proposed + 256)
    assert "do not fit" in stack(env, "check", extra_env=host | values).stderr


def test_init_without_a_model_proposes_nothing(host: dict[str, str], tmp_path: Path) -> None:
    settings = {"LLM_MODELS_DIR": "", "LLM_MODEL_FILE": ""}
    result = stack(tmp_path / ".env", "init", extra_env=host | settings)
    assert result.returncode == 0, result.stderr
    assert "LLM_CTX_PER_SLOT" not in result.stderr
    assert "GPU memory" not in result.stderr


def test_what_to_lower_leaves_out_what_is_set(tmp_path: Path) -> None:
    model = vram.load_model(write_header_only(tmp_path / "llama3.gguf", **LLAMA3_8B))
    setup = vram.Setup(1, 8192, type_k="q8_0", type_v="q8_0")
    lines = vram.remedies(vram.Stack(model, setup, None, "", False, (("GPU", 4096),)))
    assert lines == ["a smaller quant or model (the weights take 4.06 GiB)"]
