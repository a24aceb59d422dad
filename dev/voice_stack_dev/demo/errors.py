"""The one error the demo reports: which service, why, and where its log is."""

from __future__ import annotations

from pathlib import Path


class DemoError(Exception):
    """A failed step, phrased for the person running the demo."""

    def __init__(self, service: str, reason: str, log_path: str | Path | None = None) -> None:
        super().__init__(f"{service}: {reason}")
        self.service = service
        self.reason = reason
        self.log_path = str(log_path) if log_path else None

    def describe(self) -> str:
        text = f"{self.service} failed: {self.reason}"
        if self.log_path:
            text += f"\n  log: {self.log_path}"
        return text
