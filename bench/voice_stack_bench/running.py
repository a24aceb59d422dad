"""How a benchmark that starts servers runs: its logs in a fresh temporary folder, every server
it started stopped on the way out (Ctrl-C and SIGTERM included), one JSON document to stdout."""

from __future__ import annotations

import json
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from voice_stack_dev.procs import Service

type Measure = Callable[[Path, Callable[[Service], None]], Any]


def print_measured(prefix: str, measure: Measure) -> None:
    """`measure(logs, started)` prints as JSON; `started` is handed each server to stop."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    logs = Path(tempfile.mkdtemp(prefix=prefix))
    started: list[Service] = []
    try:
        print(json.dumps(measure(logs, started.append), indent=1))
    finally:
        for service in reversed(started):
            service.stop()
