"""A log of what clients get wrong, with a budget per host: any LAN host can send bad events as
fast as it likes, and each would otherwise write a line (or a traceback) to the log. A host gets
BURST lines at once, then one more every EVERY seconds; the next line it gets says how many were
left out meanwhile. Hosts are forgotten oldest first past HOSTS."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from aiohttp.http_exceptions import HttpProcessingError

_LOGGER = logging.getLogger("voice_stack_gateway.clients")
BURST = 5
EVERY = 60.0
HOSTS = 256


class ClientLog:
    def __init__(self, burst: int = BURST, every: float = EVERY, hosts: int = HOSTS) -> None:
        self._burst = burst
        self._every = every
        self._hosts = hosts
        # per host: (tokens left, when they were counted, lines left out since the last one)
        self._budget: OrderedDict[str, tuple[float, float, int]] = OrderedDict()
        self.written = 0  # lines written, and left out (what the budget did, for the tests)
        self.left_out = 0

    def budget_filter(self) -> logging.Filter:
        """For a library's logger whose records name the client first (aiohttp's server: "Error
        handling request from %s", with a traceback for every malformed request): the same
        budget, and a client's mistake logged as one INFO line, not an ERROR traceback."""
        return _BudgetFilter(self)

    def mistake(self, host: str, msg: str, *args: object) -> None:
        self._write(host, logging.INFO, msg, args, exc_info=False)

    def bug(self, host: str, msg: str, *args: object) -> None:
        """An unexpected failure (a bug of ours) a client's request ran into, with its traceback."""
        self._write(host, logging.ERROR, msg, args, exc_info=True)

    def _write(
        self, host: str, level: int, msg: str, args: tuple[object, ...], *, exc_info: bool
    ) -> None:
        if not _LOGGER.isEnabledFor(level):
            return
        skipped = self.take(host)
        if skipped is None:
            return
        if skipped:
            msg += f" ({skipped} more from {host} not logged)"
        _LOGGER.log(level, msg, *args, exc_info=exc_info)

    def take(self, host: str) -> int | None:
        """Spend one line of `host`'s budget: the lines left out before it, or None."""
        skipped = self._take(host)
        if skipped is None:
            self.left_out += 1
        else:
            self.written += 1
        return skipped

    def _take(self, host: str) -> int | None:
        """The lines left out before this one, or None if this one is left out too."""
        now = time.monotonic()
        tokens, since, skipped = self._budget.pop(host, (float(self._burst), now, 0))
        tokens = min(float(self._burst), tokens + (now - since) / self._every)
        if tokens >= 1:
            self._remember(host, (tokens - 1, now, 0))
            return skipped
        self._remember(host, (tokens, now, skipped + 1))
        return None

    def _remember(self, host: str, budget: tuple[float, float, int]) -> None:
        self._budget[host] = budget
        while len(self._budget) > self._hosts:
            self._budget.popitem(last=False)


class _BudgetFilter(logging.Filter):
    def __init__(self, log: ClientLog) -> None:
        super().__init__()
        self._log = log

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        skipped = self._log.take(str(args[0]) if args else "?")
        if skipped is None:
            return False
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:  # a malformed request
            what = str(getattr(exc, "message", "") or exc).strip().splitlines()[0][:160]
            record.msg = f"{record.msg}: {type(exc).__name__}: {what}"
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        if skipped:
            record.msg = f"{record.msg} ({skipped} more from {args[0]} not logged)"
        return True
