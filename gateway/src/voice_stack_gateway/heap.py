"""Free heap pages back to the OS when the gateway falls idle (glibc only).

Each turn allocates and frees buffers of every size (audio chunks, uploads and their early
copies, HTTP bodies). glibc keeps what is freed inside its heap, and fragments that cannot be
reused pile up: in a 60-minute soak the heap held 3.8 MB free against 9.7 MB in use, and RSS grew
by 7 % while the memory in use stayed flat; `malloc_trim(0)` gave 3.3 MB back at once. The trim
runs when the last connection closes, at most once per interval: it takes 0.6 ms at the median
but up to 24 ms on a fragmented heap, a stall no stream in flight should see.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable

TRIM_INTERVAL_S = 30.0

Trim = Callable[[int], int]


def glibc_trim() -> Trim | None:
    """glibc's malloc_trim, or None on another C library (musl, macOS) that has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class HeapTrimmer:
    def __init__(
        self,
        trim: Trim | None,
        interval_s: float = TRIM_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._trim = trim
        self._interval = interval_s
        self._clock = clock
        self._last: float | None = None
        self.trims = 0

    def idle(self) -> None:
        """No connection is open: trim, unless it was done within the interval."""
        if self._trim is None:
            return
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return
        self._last = now
        self._trim(0)
        self.trims += 1
