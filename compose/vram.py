#!/usr/bin/env python3
"""Does the chosen set fit this host's GPU memory? `./stack check` and `./stack init` run this
(through stack-vram.sh, which gathers the settings and each GPU's memory.total).

What llama-server needs on the GPU comes from the GGUF's header alone (never its tensor data): the
weights' bytes from the tensor infos, and the KV cache for LLM_PARALLEL slots of LLM_CTX_PER_SLOT
tokens, sized the way llama.cpp sizes it. Then a compute-buffer allowance, the CUDA runtime, the
draft model when one is set, and what the speech servers measurably take (the tables below).
tests/compose/test_vram.py holds the weights and KV figures against what the real llama-server
reports for the same files and flags.

Standard library only, Python 3.9 or newer: it runs on the GPU host's own python3.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

MIB = 1 << 20
GIB = 1 << 30
CELL_PAD = 256  # llama.cpp pads each slot's KV cells, and the sliding-window cache, to 256
UBATCH = 512  # llama-server's default -ub
DOES_NOT_FIT = 3  # check's exit status (2: an unreadable GGUF or flag; 1: a crash)

# ggml tensor types by id: (elements per block, bytes per block). ggml's type_traits; gguf-py's
# GGML_QUANT_SIZES holds the same table (the tests compare the two).
GGML_TYPES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18),
}  # fmt: skip
# The KV cache types llama-server takes (-ctk/-ctv), by name: (elements per block, bytes).
KV_TYPES: dict[str, tuple[int, int]] = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18),
    "q4_1": (32, 20), "iq4_nl": (32, 18), "q5_0": (32, 22), "q5_1": (32, 24),
}  # fmt: skip

# Sliding-window layers: which layers of an architecture use the window when the GGUF sets
# `<arch>.attention.sliding_window` but no `sliding_window_pattern`. llama.cpp's
# set_swa_pattern(P): layer i is windowed unless i % P == P - 1. Each row was checked against the
# KV cache llama-server b11669 builds for a model of that architecture (tests/compose/test_vram.py);
# any other architecture with a window is counted at full context and only warned about.
SWA_PERIOD = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}

# The speech servers (profile "speech"), as the most GPU memory their process took, in MiB.
# ASR is speaches with faster-whisper (CTranslate2, float16 on CUDA), found by the model id;
# "#1030" is SYSTRAN/faster-whisper#1030: 13 minutes of audio, beam 5, on an RTX 2080 Ti.
#   words in ASR_MODEL         MiB   where the figure comes from
ASR_VRAM: tuple[tuple[tuple[str, ...], int, str], ...] = (
    (("parakeet",), 3000, "estimate: 0.6B parameters as fp32 ONNX (2.4 GB) plus its runtime"),
    (("turbo",), 2537, "faster-whisper's benchmark #1030: large-v3-turbo, fp16"),
    (("distil", "large"), 2409, "faster-whisper's benchmark #1030: distil-large-v3, fp16"),
    (("large",), 4521, "faster-whisper's benchmark #1030: large-v3, fp16"),
    (("distil", "medium"), 1800, "estimate: 394M parameters x 2 bytes + ~1 GB, as those measured"),
    (("medium",), 2500, "estimate: 769M parameters x 2 bytes + ~1 GB, as those measured"),
    (("small",), 1500, "estimate: 244M parameters x 2 bytes + ~1 GB, as those measured"),
    (("base",), 1150, "estimate: 74M parameters x 2 bytes + ~1 GB, as those measured"),
    (("tiny",), 1100, "estimate: 39M parameters x 2 bytes + ~1 GB, as those measured"),
)  # fmt: skip
ASR_UNKNOWN = (4521, "not a model this check knows: counted as large-v3 (4521 MiB)")
# TTS is Kokoro-FastAPI (Kokoro-82M, PyTorch): 1020 MiB after its warm-up
# (remsky/Kokoro-FastAPI#15), and more is reserved while it synthesises.
TTS_VRAM = (1536, "Kokoro-82M: 1020 MiB idle (Kokoro-FastAPI#15) + room to synthesise")
# llama-server's CUDA context, cuBLAS workspace and memory pools, which no header tells: the
# margin llama.cpp's own --fit keeps free on each GPU for them (--fit-target, default 1024 MiB).
LLM_RUNTIME = 1024 * MIB
# LLM_EXTRA_ARGS flags that move weights or the KV cache off the GPU: not modelled, so warned of.
UNMODELLED_FLAGS = {
    "-ot", "--override-tensor", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe", "-nkvo",
    "--no-kv-offload", "-ts", "--tensor-split", "-sm", "--split-mode",
}  # fmt: skip


class GgufError(Exception):
    """The file is not a GGUF this reader understands; the message says why."""


# --- the GGUF header ------------------------------------------------------------------------

_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_STRING, _ARRAY = 8, 9
_KEEP = 1 << 16  # numeric arrays up to this long are kept (per-layer values); others only counted


@dataclass(frozen=True)
class Counted:
    """An array the reader walked past: only its length (the vocabulary, the merges)."""

    length: int


@dataclass(frozen=True)
class Gguf:
    meta: dict[str, object]
    tensors: dict[str, int]  # name -> bytes of its data


class _Reader:
    def __init__(self, file: BinaryIO) -> None:
        self.file = file

    def take(self, n: int) -> bytes:
        data = self.file.read(n)
        if len(data) != n:
            raise GgufError("the file ends inside its header (an incomplete download?)")
        return data

    def number(self, code: str) -> object:
        value: object = struct.unpack("<" + code, self.take(struct.calcsize(code)))[0]
        return value

    def u32(self) -> int:
        return int.from_bytes(self.take(4), "little")

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "little")

    def string(self) -> str:
        return self.take(self.u64()).decode("utf-8", "replace")

    def value(self, vtype: int) -> object:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            return self.array()
        if vtype not in _SCALARS:
            raise GgufError(f"unknown metadata value type {vtype}")
        return self.number(_SCALARS[vtype])

    def array(self) -> object:
        itype, length = self.u32(), self.u64()
        code = _SCALARS.get(itype)
        if code is not None:
            size = struct.calcsize(code) * length
            if length <= _KEEP:
                return list(struct.unpack(f"<{length}{code}", self.take(size)))
            self.file.seek(size, os.SEEK_CUR)
        else:
            for _ in range(length):  # strings (or nested arrays): walked, not kept
                if itype == _STRING:
                    self.file.seek(self.u64(), os.SEEK_CUR)
                else:
                    self.value(itype)
        return Counted(length)


def read_gguf(path: Path) -> Gguf:
    """The metadata and each tensor's data size, from the header only."""
    with path.open("rb", buffering=1 << 20) as file:
        reader = _Reader(file)
        if reader.take(4) != b"GGUF":
            raise GgufError("not a GGUF file")
        version = reader.u32()
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} (this reads 2 and 3, little-endian)")
        n_tensors, n_kv = reader.u64(), reader.u64()
        meta: dict[str, object] = {}
        for _ in range(n_kv):
            key = reader.string()
            meta[key] = reader.value(reader.u32())
        infos: list[tuple[str, int, int, int]] = []  # name, elements, ggml type, offset
        for _ in range(n_tensors):
            name = reader.string()
            dims = [reader.u64() for _ in range(reader.u32())]
            ggml_type, offset = reader.u32(), reader.u64()
            infos.append((name, math.prod(dims), ggml_type, offset))
        alignment = _int(meta.get("general.alignment")) or 32
        data_start = -(-file.tell() // alignment) * alignment
        file_size = os.fstat(file.fileno()).st_size
    return Gguf(meta, _tensor_sizes(infos, file_size - data_start))


def _tensor_sizes(infos: list[tuple[str, int, int, int]], data_size: int) -> dict[str, int]:
    """Bytes per tensor from its type; a type newer than this table by the distance to the next
    tensor's data (which includes the alignment padding)."""
    ends = sorted({offset for *_, offset in infos} | {data_size})
    sizes = {}
    for name, elements, ggml_type, offset in infos:
        if ggml_type in GGML_TYPES:
            block, size = GGML_TYPES[ggml_type]
            sizes[name] = -(-elements // block) * size
        else:
            sizes[name] = next(end for end in ends if end > offset) - offset
    return sizes


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _per_layer(value: object, n_layer: int, default: int) -> tuple[int, ...]:
    """A per-layer hyperparameter: one number for all layers, or an array of one per layer."""
    if isinstance(value, list) and len(value) == n_layer:
        return tuple(_int(v) for v in value)
    return (_int(value) if isinstance(value, (int, float)) else default,) * n_layer


# --- what a model is made of ----------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    n_head_kv: int
    k_len: int  # key and value length of one head
    v_len: int
    swa: bool  # a sliding-window layer


@dataclass(frozen=True)
class Model:
    name: str
    arch: str
    n_ctx_train: int
    n_embd: int
    n_head: int
    n_vocab: int
    n_ff: int  # the widest feed-forward a token goes through (MoE: the experts it uses)
    n_swa: int
    layers: tuple[Layer, ...]
    layer_bytes: tuple[int, ...]  # the blk.N.* tensors of each layer
    input_bytes: int  # token_embd: llama.cpp keeps the input layer on the CPU
    output_bytes: int  # every other tensor: on the output layer's device
    tied: bool  # no output.weight: llama.cpp copies token_embd to the output layer's device
    caveats: tuple[str, ...]  # what this estimate does not model (then it warns, never refuses)

    @property
    def weights(self) -> int:
        return sum(self.layer_bytes) + self.input_bytes + self.output_bytes


def load_model(path: Path) -> Model:
    """A model's shape and sizes from its GGUF header (all shards of a split GGUF)."""
    first = read_gguf(path)
    tensors = dict(first.tensors)
    for shard in _other_shards(path, _int(first.meta.get("split.count"))):
        tensors.update(read_gguf(shard).tensors)
    return _model(path.name, first.meta, tensors)


def _other_shards(path: Path, count: int) -> list[Path]:
    if count <= 1:
        return []
    match = re.fullmatch(r"(.*)-00001-of-(\d{5})\.gguf", path.name)
    if not match:
        raise GgufError(f"a split GGUF in {count} files: name the first, *-00001-of-*.gguf")
    shards = [path.with_name(f"{match[1]}-{i:05d}-of-{match[2]}.gguf") for i in range(2, count + 1)]
    missing = [shard.name for shard in shards if not shard.is_file()]
    if missing:
        raise GgufError(f"a split GGUF whose other files are missing: {', '.join(missing)}")
    return shards


def _model(name: str, meta: dict[str, object], tensors: dict[str, int]) -> Model:
    arch = str(meta.get("general.architecture", ""))

    def key(suffix: str) -> object:
        return meta.get(f"{arch}.{suffix}")

    n_layer = _int(key("block_count"))
    if not arch or n_layer <= 0:
        raise GgufError("no general.architecture or block_count in its header")
    n_embd = _int(key("embedding_length"))
    heads = _per_layer(key("attention.head_count"), n_layer, 0)
    n_head = max(heads) or 1
    heads_kv = _per_layer(key("attention.head_count_kv"), n_layer, n_head)
    k_len = _int(key("attention.key_length")) or n_embd // n_head
    v_len = _int(key("attention.value_length")) or n_embd // n_head
    k_len_swa = _int(key("attention.key_length_swa")) or k_len
    v_len_swa = _int(key("attention.value_length_swa")) or v_len
    n_swa = _int(key("attention.sliding_window"))
    swa, caveats = _swa_layers(arch, n_layer, n_swa, key("attention.sliding_window_pattern"))
    layers = tuple(
        Layer(kv, k_len_swa if s else k_len, v_len_swa if s else v_len, s)
        for kv, s in zip(heads_kv, swa)
    )
    layer_bytes = [0] * n_layer
    input_bytes = output_bytes = 0
    for tensor, size in tensors.items():
        block = re.match(r"blk\.(\d+)\.", tensor)
        if block and int(block[1]) < n_layer:
            layer_bytes[int(block[1])] += size
        elif tensor.startswith(("token_embd.", "per_layer_token_embd.")):
            input_bytes += size
        else:
            output_bytes += size
    moe = _int(key("expert_used_count")) * _int(key("expert_feed_forward_length"))
    moe += _int(key("expert_shared_count")) * _int(key("expert_shared_feed_forward_length"))
    vocab = meta.get("tokenizer.ggml.tokens")
    n_vocab = _int(key("vocab_size")) or (
        vocab.length if isinstance(vocab, Counted) else len(vocab) if isinstance(vocab, list) else 0
    )
    return Model(
        name=name,
        arch=arch,
        n_ctx_train=_int(key("context_length")),
        n_embd=n_embd,
        n_head=n_head,
        n_vocab=n_vocab,
        n_ff=max(*_per_layer(key("feed_forward_length"), n_layer, 0), moe),
        n_swa=n_swa,
        layers=layers,
        layer_bytes=tuple(layer_bytes),
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        tied="output.weight" not in tensors,
        caveats=tuple(caveats + _unmodelled(arch, meta)),
    )


def _swa_layers(
    arch: str, n_layer: int, n_swa: int, pattern: object
) -> tuple[list[bool], list[str]]:
    if n_swa <= 0:
        return [False] * n_layer, []
    if isinstance(pattern, list) and len(pattern) == n_layer:
        return [bool(v) for v in pattern], []
    period = _int(pattern) if isinstance(pattern, int) else SWA_PERIOD.get(arch, 0)
    if period > 0:
        return [i % period < period - 1 for i in range(n_layer)], []
    return [False] * n_layer, [
        f"which layers of {arch} use its {n_swa}-token window is not known here:"
        " every layer counted at full context"
    ]


def _unmodelled(arch: str, meta: dict[str, object]) -> list[str]:
    keys = " ".join(meta)
    found = []
    if re.search(rf"\b{re.escape(arch)}\.(ssm|wkv|shortconv)\.|full_attention_interval", keys):
        found.append("recurrent layers: counted as attention layers, their state not counted")
    if f"{arch}.attention.kv_lora_rank" in meta:
        found.append("MLA attention: KV cache counted as plain attention")
    if f"{arch}.attention.shared_kv_layers" in meta:
        found.append("layers that share a KV cache: each counted with its own")
    if arch == "llama4":
        found.append("llama4's chunked attention: every layer counted at full context")
    return found


# --- llama-server's settings ----------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What compose passes to llama-server, LLM_EXTRA_ARGS applied last (the last flag wins)."""

    parallel: int
    ctx_per_slot: int
    gpu_layers: int | None = None  # None: every layer (999, all); auto is one of the caveats
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"
    type_k_draft: str = "f16"
    type_v_draft: str = "f16"
    draft_gpu_layers: int | None = None
    ubatch: int = UBATCH
    kv_unified: bool = False  # compose passes --no-kv-unified
    swa_full: bool = False
    outputs_per_slot: int = 1  # speculative decoding: the draft tokens + 1
    caveats: tuple[str, ...] = ()


_VALUE_FLAGS = {
    "type_k": ("-ctk", "--cache-type-k"),
    "type_v": ("-ctv", "--cache-type-v"),
    "type_k_draft": ("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k"),
    "type_v_draft": ("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v"),
    "ubatch": ("-ub", "--ubatch-size"),
    "gpu_layers": ("-ngl", "--gpu-layers", "--n-gpu-layers"),
    "draft_gpu_layers": (
        "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl",
    ),
}  # fmt: skip
_SWITCHES = {
    "--kv-unified": ("kv_unified", True),
    "-kvu": ("kv_unified", True),
    "--no-kv-unified": ("kv_unified", False),
    "-no-kvu": ("kv_unified", False),
    "--swa-full": ("swa_full", True),
}


def gpu_layers(value: str) -> int | None:
    """-ngl's value: a number, all (None), or auto (also None: a caveat elsewhere)."""
    return int(value) if value.strip().isdigit() else None


def apply_args(setup: Setup, argv: Sequence[str]) -> Setup:
    """llama-server flags (compose's, then LLM_EXTRA_ARGS) that change what goes on the GPU."""
    flag_of = {flag: field for field, flags in _VALUE_FLAGS.items() for flag in flags}
    changes: dict[str, object] = {}
    caveats = list(setup.caveats)
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        flag, _, inline = tokens[i].partition("=")
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        i += 1
        if flag in ("-fa", "--flash-attn"):  # its value is optional: -fa alone is on
            value = inline or (following if following in ("on", "off", "auto") else "on")
            i += bool(not inline and following == value)
            changes["flash_attn"] = value
        elif flag in flag_of:
            value = inline or following
            i += not inline
            field = flag_of[flag]
            if field.startswith("type_"):
                if value not in KV_TYPES:
                    raise ValueError(f"{flag} {value}: not a KV cache type llama-server takes")
                changes[field] = value
            elif field == "ubatch":
                changes[field] = int(value)
            else:
                changes[field] = gpu_layers(value)
                if value == "auto":
                    caveats.append(f"{flag} auto: llama-server fits the layers itself")
        elif flag in _SWITCHES:
            field, on = _SWITCHES[flag]
            changes[field] = on
        elif flag in UNMODELLED_FLAGS:
            caveats.append(f"{flag} moves parts off the GPU: counted as if on it")
    # each value was parsed for its own field above; mypy cannot follow a dict of them
    return replace(setup, caveats=tuple(caveats), **changes)  # type: ignore[arg-type]


# --- the arithmetic -------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    label: str
    nbytes: int
    detail: str


def _pad(n: int, to: int = CELL_PAD) -> int:
    return -(-n // to) * to


def _row(kv_type: str, elements: int) -> int:
    block, size = KV_TYPES[kv_type]
    return -(-elements // block) * size


def kv_cells(model: Model, setup: Setup) -> tuple[int, int, int]:
    """(streams, cells per stream of a full-attention layer, of a sliding-window layer), as
    llama_kv_cache_iswa sizes them: without the unified cache each slot is a stream of its own
    with its context padded to 256 cells; a windowed layer keeps the window plus one ubatch."""
    if setup.kv_unified:
        streams, base, window = 1, _pad(setup.ctx_per_slot * setup.parallel), setup.parallel
    else:
        streams, base, window = setup.parallel, _pad(setup.ctx_per_slot), 1
    swa = base if setup.swa_full else _pad(min(base, model.n_swa * window + setup.ubatch))
    return streams, base, swa


def on_gpu(model: Model, layers: int | None) -> tuple[list[bool], bool]:
    """Which repeating layers and whether the output layer are on the GPU: llama.cpp offloads the
    last -ngl of the n_layer + 1 layers (the output layer is the + 1: the first offloaded)."""
    n_layer = len(model.layers)
    n_gpu = n_layer + 1 if layers is None else min(layers, n_layer + 1)
    start = n_layer + 1 - n_gpu
    return [i >= start for i in range(n_layer)], n_gpu > 0


def weights_on_gpu(model: Model, layers: int | None) -> int:
    gpu, output = on_gpu(model, layers)
    total = sum(size for size, here in zip(model.layer_bytes, gpu) if here)
    if output:
        total += model.output_bytes + (model.input_bytes if model.tied else 0)
    return total


def kv_bytes(
    model: Model, setup: Setup, type_k: str, type_v: str, layers: int | None = None
) -> int:
    streams, base, swa = kv_cells(model, setup)
    gpu, _ = on_gpu(model, layers)
    per_cell = [
        (swa if layer.swa else base)
        * (
            _row(type_k, layer.n_head_kv * layer.k_len)
            + _row(type_v, layer.n_head_kv * layer.v_len)
        )
        for layer, here in zip(model.layers, gpu)
        if here
    ]
    return streams * sum(per_cell)


def compute_bytes(model: Model, setup: Setup) -> int:
    """An allowance for llama.cpp's compute buffer (its graph's activations for one ubatch); the
    tests check it covers what llama-server reserves. Per ubatch token, in f32: the residual
    stream and norms, Q/K/V, the feed-forward's gate, up and product; the attention mask over
    each slot's cells; the logits of each slot's outputs; without flash attention, the K*Q
    scores and their softmax."""
    _, base, swa = kv_cells(model, setup)
    head = max((max(layer.k_len, layer.v_len) for layer in model.layers), default=0)
    heads_kv = max((layer.n_head_kv for layer in model.layers), default=0)
    per_token = 4 * model.n_embd + (model.n_head + 2 * heads_kv) * head + 3 * model.n_ff
    mask = base + (swa if any(layer.swa for layer in model.layers) else 0)
    scores = 2 * base * model.n_head if setup.flash_attn == "off" else 0
    logits = model.n_vocab * setup.parallel * setup.outputs_per_slot
    return 4 * (setup.ubatch * (per_token + mask + scores) + logits)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def llm_parts(model: Model, setup: Setup, role: str = "llm") -> list[Part]:
    draft = role != "llm"
    layers = setup.draft_gpu_layers if draft else setup.gpu_layers
    type_k, type_v = (
        (setup.type_k_draft, setup.type_v_draft) if draft else (setup.type_k, setup.type_v)
    )
    gpu, output = on_gpu(model, layers)
    n_layer = len(model.layers)
    where = f"{sum(gpu) + output} of {n_layer + 1} layers on the GPU"
    if output:
        where += " (the token embeddings stay in RAM)" if not model.tied else ""
    kind = f"{type_k} K, {type_v} V" if type_k != type_v else f"{type_k} K and V"
    n_swa = sum(layer.swa for layer in model.layers)
    window = f", {n_swa} of them windowed ({model.n_swa} tokens)" if n_swa else ""
    fa = setup.flash_attn
    return [
        Part(f"{role} weights", weights_on_gpu(model, layers), f"{model.name}, {where}"),
        Part(
            f"{role} KV cache",
            kv_bytes(model, setup, type_k, type_v, layers),
            f"{setup.parallel} slots x {setup.ctx_per_slot} tokens, {kind}, "
            f"{n_layer} layers{window}",
        ),
        Part(f"{role} compute", compute_bytes(model, setup), f"ubatch {setup.ubatch}, -fa {fa}"),
    ]


def asr_need(model_id: str) -> Part:
    words = model_id.lower()
    for needles, mib, source in ASR_VRAM:
        if all(needle in words for needle in needles):
            return Part("asr", mib * MIB, f"{model_id} ({source})")
    return Part("asr", ASR_UNKNOWN[0] * MIB, f"{model_id} ({ASR_UNKNOWN[1]})")


@dataclass(frozen=True)
class Stack:
    """Everything this check counts: the LLM, its draft, the speech servers, the GPUs."""

    model: Model
    setup: Setup
    draft: Model | None
    asr_model: str  # empty: ASR does not run here
    tts: bool
    gpus: tuple[tuple[str, int], ...]  # name, memory.total in MiB

    def parts(self, setup: Setup | None = None) -> list[Part]:
        setup = setup or self.setup
        parts = llm_parts(self.model, setup)
        parts.append(Part("llm runtime", LLM_RUNTIME, "CUDA context, cuBLAS, llama.cpp's pools"))
        if self.draft is not None:
            parts += llm_parts(self.draft, setup, "draft")
        if self.asr_model:
            parts.append(asr_need(self.asr_model))
        if self.tts:
            parts.append(Part("tts", TTS_VRAM[0] * MIB, TTS_VRAM[1]))
        return parts

    def need(self, setup: Setup | None = None) -> int:
        return sum(part.nbytes for part in self.parts(setup))

    @property
    def available(self) -> int:
        return sum(mib for _, mib in self.gpus) * MIB

    def fits(self, setup: Setup | None = None) -> bool:
        return self.need(setup) <= self.available

    @property
    def caveats(self) -> tuple[str, ...]:
        draft = self.draft.caveats if self.draft else ()
        return self.model.caveats + draft + self.setup.caveats

    def largest_ctx(self, limit: int) -> int:
        """The largest context per slot (a multiple of 256, at most `limit`) that fits; 0: none."""
        low, high = 0, limit // CELL_PAD
        while low < high:
            mid = (low + high + 1) // 2
            if self.fits(replace(self.setup, ctx_per_slot=mid * CELL_PAD)):
                low = mid
            else:
                high = mid - 1
        return low * CELL_PAD

    def largest_parallel(self) -> int:
        fitting = (
            n
            for n in range(self.setup.parallel, 0, -1)
            if self.fits(replace(self.setup, parallel=n))
        )
        return next(fitting, 0)


# --- what ./stack prints --------------------------------------------------------------------


def describe_gpus(stack: Stack) -> str:
    return ", ".join(f"{name}: {mib} MiB" for name, mib in stack.gpus)


def breakdown(stack: Stack) -> list[str]:
    return [f"  {p.label:<15} {_gib(p.nbytes):>10}  {p.detail}" for p in stack.parts()]


def remedies(stack: Stack) -> list[str]:
    """What to lower, each with what it gives."""
    setup = stack.setup
    lines = []
    ctx = stack.largest_ctx(setup.ctx_per_slot - 1)
    if ctx:
        lines.append(f"LLM_CTX_PER_SLOT={ctx} (or less) with LLM_PARALLEL={setup.parallel}")
    parallel = stack.largest_parallel()
    if parallel:
        lines.append(
            f"LLM_PARALLEL={parallel} with LLM_CTX_PER_SLOT={setup.ctx_per_slot}"
            " (keep LLM_RESERVED_SLOTS below it)"
        )
    if KV_TYPES[setup.type_k][0] == 1 or KV_TYPES[setup.type_v][0] == 1:  # f16, bf16, f32
        q8 = replace(setup, type_k="q8_0", type_v="q8_0")
        kv = kv_bytes(stack.model, q8, "q8_0", "q8_0", setup.gpu_layers)
        alone = "fits" if stack.fits(q8) else "not enough alone"
        lines.append(
            f'LLM_EXTRA_ARGS="-ctk q8_0 -ctv q8_0": the KV cache in {_gib(kv)} ({alone};'
            " heavier quantisation hurts tool calls)"
        )
    weights = weights_on_gpu(stack.model, setup.gpu_layers)
    lines.append(f"a smaller quant or model (the weights take {_gib(weights)})")
    if stack.asr_model:
        lines.append("a smaller ASR_MODEL, or the speech servers on another host")
    return lines


def check(stack: Stack) -> int:
    need, have = stack.need(), stack.available
    for caveat in stack.caveats:
        print(f"stack: GPU memory estimate: {caveat}", file=sys.stderr)
    train = stack.model.n_ctx_train
    if train and stack.setup.ctx_per_slot > train:
        print(
            f"stack: LLM_CTX_PER_SLOT={stack.setup.ctx_per_slot} is more than {stack.model.name}"
            f" was trained for ({train} tokens)",
            file=sys.stderr,
        )
    if need <= have:
        print(
            f"stack: GPU memory: this set needs about {_gib(need)} of {_gib(have)}"
            f" ({describe_gpus(stack)})",
            file=sys.stderr,
        )
        return 0
    print(
        f"stack check: this set needs about {_gib(need)} of GPU memory, this host has"
        f" {_gib(have)} ({describe_gpus(stack)}):",
        *breakdown(stack),
        "  lower one of:",
        *(f"    {line}" for line in remedies(stack)),
        sep="\n",
        file=sys.stderr,
    )
    if stack.caveats:  # the estimate is known to be rough here: say so, do not refuse
        print("stack: not refused, since the estimate is rough for this set", file=sys.stderr)
        return 0
    return DOES_NOT_FIT


def propose(stack: Stack) -> int:
    limit = stack.model.n_ctx_train or 1 << 20
    ctx = stack.largest_ctx(limit)
    where = f"{stack.model.name} on {describe_gpus(stack)}"
    if ctx:
        most = " (the most it was trained for)" if ctx == limit else ""
        now = stack.setup.ctx_per_slot
        todo = "as set" if ctx == now else f"set it in .env (it is {now})"
        print(
            f"stack: with {where} and LLM_PARALLEL={stack.setup.parallel}, up to"
            f" LLM_CTX_PER_SLOT={ctx}{most} fits: {todo}",
            file=sys.stderr,
        )
    else:
        print(
            f"stack: {where} does not fit even at 256 tokens per slot: pick a smaller quant or"
            " model, fewer LLM_PARALLEL slots, or the speech servers elsewhere",
            file=sys.stderr,
        )
    return 0


def _gpu(text: str) -> tuple[str, int]:
    name, _, mib = text.rpartition("=")
    return name, int(mib)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("mode", choices=("check", "propose"))
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--ctx-per-slot", type=int, default=8192)
    parser.add_argument("--gpu-layers", default="999")
    parser.add_argument("--flash-attn", default="auto")
    parser.add_argument("--spec-type", default="none")
    parser.add_argument("--spec-draft-n-max", type=int, default=3)
    parser.add_argument("--extra-args", default="")
    parser.add_argument("--asr-model", default="")
    parser.add_argument("--tts", action="store_true")
    parser.add_argument("--gpu", type=_gpu, action="append", default=[], help="NAME=MiB")
    args = parser.parse_args(argv)
    speculative = args.spec_type != "none" or args.draft is not None
    argv_llm = ["-ngl", args.gpu_layers, "-fa", args.flash_attn, *shlex.split(args.extra_args)]
    try:
        setup = apply_args(
            Setup(
                args.parallel,
                args.ctx_per_slot,
                outputs_per_slot=args.spec_draft_n_max + 1 if speculative else 1,
            ),
            argv_llm,
        )
    except ValueError as error:
        print(f"stack: LLM_EXTRA_ARGS: {error}", file=sys.stderr)
        return 2
    models: list[Model] = []
    for path in (args.model, args.draft):
        if path is None:
            continue
        try:
            models.append(load_model(path))
        except (GgufError, OSError) as error:
            print(f"stack: {path}: {error}", file=sys.stderr)
            return 2
    model, draft = models[0], (models[1] if len(models) > 1 else None)
    stack = Stack(model, setup, draft, args.asr_model, args.tts, tuple(args.gpu))
    return check(stack) if args.mode == "check" else propose(stack)


if __name__ == "__main__":
    sys.exit(main())
