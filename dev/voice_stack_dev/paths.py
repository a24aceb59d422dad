"""Where provisioned things live (all created by scripts/setup under the git-ignored cache)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("VOICE_STACK_CACHE", REPO / ".cache"))
MODELS = CACHE / "models"
LLAMA_SERVER = CACHE / "bin" / "llama-server"
JEMALLOC = CACHE / "jemalloc" / "libjemalloc.so.2"  # scripts/provision-jemalloc

MODEL_FILES = {
    "tiny-text": "tiny-text.gguf",
    "tiny-tool": "tiny-tool.gguf",
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
}


def venv_bin(venv: str, program: str) -> Path:
    """A program inside one of the provisioned environments (ha, ha11, gw, speech)."""
    return CACHE / "venv" / venv / "bin" / program


def model_path(name: str) -> Path:
    """Path of a provisioned model by short name, or of an explicit file."""
    path = MODELS / MODEL_FILES[name] if name in MODEL_FILES else Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"model {name!r} not found at {path}; run scripts/setup")
    return path
