"""client_log.py: what clients get wrong is logged within a budget per host."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import LineTooLong

from voice_stack_gateway import client_log
from voice_stack_gateway.client_log import ClientLog


def test_a_flooding_host_gets_a_few_lines_then_one_a_minute(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(f"{client_log.__name__}.time.monotonic", lambda: now[0])
    caplog.set_level(logging.INFO, "voice_stack_gateway")
    log = ClientLog(burst=3, every=60.0)
    for n in range(100):
        log.mistake("10.0.0.9", "bad event %d", n)
    log.mistake("10.0.0.8", "another host's mistake")  # has its own budget
    assert [r.getMessage() for r in caplog.records] == [
        "bad event 0", "bad event 1", "bad event 2", "another host's mistake"
    ]  # fmt: skip
    assert (log.written, log.left_out) == (4, 97)
    now[0] += 60
    log.mistake("10.0.0.9", "bad event %d", 100)
    assert caplog.records[-1].getMessage() == "bad event 100 (97 more from 10.0.0.9 not logged)"


def test_hosts_are_forgotten_oldest_first(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "voice_stack_gateway")
    log = ClientLog(burst=1, hosts=2)
    for host in ("a", "a", "b", "c", "a"):  # a's budget is forgotten when c arrives
        log.mistake(host, "from %s", host)
    assert [r.getMessage() for r in caplog.records] == ["from a", "from b", "from c", "from a"]


def test_nothing_is_counted_below_the_log_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "voice_stack_gateway")
    log = ClientLog(burst=1)
    log.mistake("a", "quiet")
    log.mistake("a", "quiet")
    assert (log.written, log.left_out) == (0, 0)


def test_a_librarys_tracebacks_for_client_mistakes_become_lines_within_the_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp's server logs each malformed request as an ERROR with a traceback; through the
    filter it is one INFO line within the host's budget. A 5xx (a bug) keeps its traceback."""
    caplog.set_level(logging.INFO, "voice_stack_gateway")
    logger = logging.getLogger("voice_stack_gateway.test_http")
    logger.addFilter(ClientLog(burst=2).budget_filter())
    for _ in range(4):
        log_failure(logger, LineTooLong(b"/aaaa...", 8190), "10.0.0.7")
    log_failure(logger, RuntimeError("ours"), "10.0.0.8")
    lines = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    mistake = (
        "Error handling request from 10.0.0.7: LineTooLong: Got more than 8190 bytes when"
        " reading: b'/aaaa...'."
    )
    assert lines == [
        ("INFO", mistake, False), ("INFO", mistake, False),
        ("ERROR", "Error handling request from 10.0.0.8", True),
    ]  # fmt: skip


def log_failure(logger: logging.Logger, exc: Exception, host: str) -> None:
    """As aiohttp's server logs a failed request: inside the except, with the traceback."""

    def fail() -> None:
        raise exc

    try:
        fail()
    except Exception:
        logger.exception("Error handling request from %s", host)
