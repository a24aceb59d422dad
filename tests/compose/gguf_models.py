"""Small GGUFs of the architectures compose/vram.py must size, written with gguf-py (the ha venv's
gguf, as dev/voice_stack_dev/tiny_gguf.py): random weights the real llama-server loads, so its own
KV cache and buffer figures can be held against the header arithmetic. And header-only GGUFs of
real models' shapes (no tensor data: only vram.py reads them, never llama-server)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import quantize


@dataclass(frozen=True)
class Arch:
    """The shape of one small model; `swa` is its attention.sliding_window (0: none)."""

    arch: str
    n_layer: int = 6
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 128
    swa: int = 0
    q8_0: bool = False  # the matrices in Q8_0 (else F32)
    experts: int = 0  # gpt-oss style MoE: this many experts, 2 used per token
    extra: dict[str, int] = field(default_factory=dict)  # more u32 keys, without the arch prefix


GEMMA3 = Arch("gemma3", n_layer=12, n_embd=128, head_dim=64, n_ff=256, swa=512, q8_0=True)
GEMMA2 = Arch("gemma2", swa=1024)
GPT_OSS = Arch("gpt-oss", n_layer=8, swa=128, experts=4)
COHERE2 = Arch("cohere2", n_layer=8, head_dim=16, swa=1024, extra={"rope.dimension_count": 16})
QWEN3 = Arch("qwen3", n_layer=4, n_embd=96, head_dim=128, q8_0=True)  # head_dim != n_embd / n_head


def _vocab() -> tuple[list[str], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["a", "b"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    return tokens, [int(t) for t in types + [TokenType.NORMAL] * 2]


def _shapes(spec: Arch, n_vocab: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    """Every tensor llama.cpp asks of the architecture, with its (rows, ..., columns) shape."""
    e, q, kv, ff, x = (
        spec.n_embd,
        spec.n_head * spec.head_dim,
        spec.n_head_kv * spec.head_dim,
        spec.n_ff,
        spec.experts,
    )
    yield "token_embd.weight", (n_vocab, e)
    yield "output_norm.weight", (e,)
    if spec.arch == "gpt-oss":
        yield "output.weight", (n_vocab, e)
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (e,)
        for name, rows in (("q", q), ("k", kv), ("v", kv)):
            yield p + f"attn_{name}.weight", (rows, e)
            if spec.arch == "gpt-oss":
                yield p + f"attn_{name}.bias", (rows,)
        yield p + "attn_output.weight", (e, q)
        if spec.arch in ("gemma3", "qwen3"):
            yield p + "attn_q_norm.weight", (spec.head_dim,)
            yield p + "attn_k_norm.weight", (spec.head_dim,)
        if spec.arch in ("gemma2", "gemma3", "gpt-oss"):
            yield p + "post_attention_norm.weight", (e,)
        if spec.arch in ("gemma2", "gemma3"):
            yield p + "post_ffw_norm.weight", (e,)
        if spec.arch == "gpt-oss":
            yield p + "attn_output.bias", (e,)
            yield p + "attn_sinks.weight", (spec.n_head,)
            yield p + "ffn_gate_inp.weight", (x, e)
            yield p + "ffn_gate_inp.bias", (x,)
            for name, shape in (("gate", (x, ff, e)), ("up", (x, ff, e)), ("down", (x, e, ff))):
                yield p + f"ffn_{name}_exps.weight", shape
                yield p + f"ffn_{name}_exps.bias", shape[:2]
            continue
        if spec.arch != "cohere2":
            yield p + "ffn_norm.weight", (e,)
        yield p + "ffn_gate.weight", (ff, e)
        yield p + "ffn_up.weight", (ff, e)
        yield p + "ffn_down.weight", (e, ff)


def write_model(path: Path, spec: Arch, *, split_max_tensors: int = 0) -> Path:
    """A loadable model of this shape (split in files of that many tensors when asked); returns
    the path llama-server takes (the first file of a split)."""
    tokens, types = _vocab()
    writer = GGUFWriter(path, spec.arch, split_max_tensors=split_max_tensors)
    writer.add_context_length(32768)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_layer_norm_eps(1e-5)
    if spec.swa:
        writer.add_sliding_window(spec.swa)
    if spec.experts:
        writer.add_expert_count(spec.experts)
        writer.add_expert_used_count(2)
        writer.add_expert_feed_forward_length(spec.n_ff)
    for key, value in spec.extra.items():
        writer.add_uint32(f"{spec.arch}.{key}", value)
    if spec.arch == "cohere2":
        writer.add_logit_scale(1.0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    rng = np.random.default_rng(0)
    for name, shape in _shapes(spec, len(tokens)):
        if len(shape) == 1:
            writer.add_tensor(name, np.ones(shape, dtype=np.float32))
            continue
        data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        if spec.q8_0 and shape[-1] % 32 == 0:
            packed = quantize(data, GGMLQuantizationType.Q8_0)
            writer.add_tensor(
                name, packed, raw_shape=packed.shape, raw_dtype=GGMLQuantizationType.Q8_0
            )
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if split_max_tensors:
        return next(path.parent.glob(f"{path.stem}-00001-of-*.gguf"))
    return path


# Llama-3.1-8B-Instruct Q4_K_M's shape: what a voice stack often serves. Its matrices are counted
# as Q4_K and the output as Q6_K (the real file mixes in some Q6_K, so it is a little larger).
LLAMA3_8B = {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336}
LLAMA3_VOCAB = 128256


def write_header_only(
    path: Path, *, n_layer: int, n_embd: int, n_head: int, n_head_kv: int, n_ff: int
) -> Path:
    """The header of a llama model of this shape with no tensor data after it."""
    writer = GGUFWriter(path, "llama")
    writer.add_context_length(131072)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_vocab_size(LLAMA3_VOCAB)
    kv = n_embd // n_head * n_head_kv
    q4k, q6k = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K

    def info(name: str, shape: tuple[int, ...], kind: GGMLQuantizationType | None) -> None:
        elements = int(np.prod(shape))
        if kind is None:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), elements * 4)
            return
        block, size = {q4k: (256, 144), q6k: (256, 210)}[kind]
        byte_shape = (*shape[:-1], shape[-1] // block * size)  # gguf-py takes a row's bytes
        writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), elements // block * size, kind)

    info("token_embd.weight", (LLAMA3_VOCAB, n_embd), q4k)
    info("output_norm.weight", (n_embd,), None)
    info("output.weight", (LLAMA3_VOCAB, n_embd), q6k)
    for i in range(n_layer):
        for name, shape in (
            ("attn_q", (n_embd, n_embd)),
            ("attn_k", (kv, n_embd)),
            ("attn_v", (kv, n_embd)),
            ("attn_output", (n_embd, n_embd)),
            ("ffn_gate", (n_ff, n_embd)),
            ("ffn_up", (n_ff, n_embd)),
            ("ffn_down", (n_embd, n_ff)),
        ):
            info(f"blk.{i}.{name}.weight", shape, q4k)
        info(f"blk.{i}.attn_norm.weight", (n_embd,), None)
        info(f"blk.{i}.ffn_norm.weight", (n_embd,), None)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path
