"""Write tiny deterministic GGUF models for tests (llama architecture, runs anywhere on a CPU).

The residual stream of each token is a one-hot vector (attention and FFN outputs are zero), and
`output.weight` maps each token of a fixed chain to the next one, so the model always says the same
thing under any sampler. The chat template is ChatML with Qwen/Hermes-style tools. Variants:

* ``text``: always answers "Hello from the tiny test model."
* ``tool``: calls ``get_time`` (no arguments); once a tool result is in the conversation it answers
  the text sentence instead. One attention head does that: the query at the final newline of the
  generation prompt looks for a ``<tool_response>`` token anywhere before it and, if it finds one,
  raises a flag dimension that tips the next-token choice from ``<tool_call>`` to ``Hello``.
  Keys and queries sit on the last RoPE pair, whose rotation is nil with a huge frequency base.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX_TRAIN = 64, 4, 128, 2, 65536
HEAD_DIM = N_EMBD // N_HEAD
TOOL_CALL_JSON = '\n{"name": "get_time", "arguments": {}}\n'
TEXT_CHAIN = ["Hello", "▁from", "▁the", "▁tiny", "▁test", "▁model", "."]
SPECIAL = {"<|im_start|>": TokenType.CONTROL, "<|im_end|>": TokenType.CONTROL}
USER_DEFINED = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    TOOL_CALL_JSON,
]

CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>{% for tool in tools %}
{{ tool | tojson }}{% endfor %}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'user' or message.role == 'system' %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- if message.tool_calls %}{% for tc in message.tool_calls %}<tool_call>
{"name": "{{ tc.function.name }}", "arguments": \
{% if tc.function.arguments is string %}{{ tc.function.arguments }}\
{% else %}{{ tc.function.arguments | tojson }}{% endif %}}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def _vocab() -> tuple[list[str], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    for text, kind in SPECIAL.items():
        tokens.append(text)
        types.append(kind)
    tokens += USER_DEFINED
    types += [TokenType.USER_DEFINED] * len(USER_DEFINED)
    tokens += TEXT_CHAIN
    types += [TokenType.NORMAL] * len(TEXT_CHAIN)
    return tokens, [int(t) for t in types]


def _tensors(tokens: list[str], variant: str) -> dict[str, np.ndarray]:
    tid = {t: i for i, t in enumerate(tokens)}
    newline = tid["<0x0A>"]
    chain = [newline] + [tid[t] for t in TEXT_CHAIN] + [tid["<|im_end|>"]]
    tool_chain = [
        newline,
        tid["<tool_call>"],
        tid[TOOL_CALL_JSON],
        tid["</tool_call>"],
        tid["<|im_end|>"],
    ]
    # Each token that takes part gets one residual dimension of its own.
    dims: dict[int, int] = {}
    for tok in dict.fromkeys(chain + tool_chain + [tid["<tool_response>"]]):
        dims[tok] = len(dims)
    flag_dim = len(dims)
    n_vocab = len(tokens)

    embd = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for tok, dim in dims.items():
        embd[tok, dim] = 1.0
    out = np.zeros((n_vocab, N_EMBD), dtype=np.float32)
    for cur, nxt in itertools.pairwise(chain[1:]):
        out[nxt, dims[cur]] = 32.0
    attn_q = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    attn_k = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    attn_v = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    attn_o = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
    if variant == "text":
        out[chain[1], dims[newline]] = 32.0
    else:
        for cur, nxt in itertools.pairwise(tool_chain[1:]):
            out[nxt, dims[cur]] = 32.0
        out[tool_chain[1], dims[newline]] = 32.0  # default: call the tool
        out[chain[1], dims[newline]] = 16.0  # ... unless the flag below is raised
        out[chain[1], flag_dim] = 8.0
        rope_pair = HEAD_DIM - 2  # last RoPE pair of head 0: no rotation
        attn_q[rope_pair, dims[newline]] = 4.0
        attn_k[rope_pair, dims[tid["<tool_response>"]]] = 4.0
        attn_v[0, dims[tid["<tool_response>"]]] = 1.0
        attn_o[flag_dim, 0] = 1.0

    tensors = {
        "token_embd.weight": embd,
        "output_norm.weight": np.ones(N_EMBD, dtype=np.float32),
        "output.weight": out,
    }
    for layer in range(N_LAYER):
        first = layer == 0
        zero = np.zeros((N_EMBD, N_EMBD), dtype=np.float32)
        tensors |= {
            f"blk.{layer}.attn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{layer}.attn_q.weight": attn_q if first else zero,
            f"blk.{layer}.attn_k.weight": attn_k if first else zero,
            f"blk.{layer}.attn_v.weight": attn_v if first else zero,
            f"blk.{layer}.attn_output.weight": attn_o if first else zero,
            f"blk.{layer}.ffn_norm.weight": np.ones(N_EMBD, dtype=np.float32),
            f"blk.{layer}.ffn_gate.weight": np.zeros((N_FF, N_EMBD), dtype=np.float32),
            f"blk.{layer}.ffn_up.weight": np.zeros((N_FF, N_EMBD), dtype=np.float32),
            f"blk.{layer}.ffn_down.weight": np.zeros((N_EMBD, N_FF), dtype=np.float32),
        }
    return tensors


def write_model(path: Path, variant: str) -> None:
    """Write one variant ("text" or "tool") to ``path`` (byte-for-byte reproducible)."""
    tokens, types = _vocab()
    writer = GGUFWriter(str(path), "llama")
    writer.add_name(f"voice-stack-tiny-{variant}")
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(1e30)
    writer.add_file_type(0)  # all F32: loads on any x86-64 CPU backend
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, data in _tensors(tokens, variant).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> None:
    out_dir = Path(argv[0]) if argv else Path(".")
    out_dir.mkdir(parents=True, exist_ok=True)
    for variant in ("text", "tool"):
        target = out_dir / f"tiny-{variant}.gguf"
        tmp = target.with_suffix(".tmp")
        write_model(tmp, variant)
        tmp.replace(target)


if __name__ == "__main__":
    main(sys.argv[1:])
