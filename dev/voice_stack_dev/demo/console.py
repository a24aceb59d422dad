"""Progress lines on stderr (stdout carries only the report, or its JSON)."""

from __future__ import annotations

import sys


def log(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)
