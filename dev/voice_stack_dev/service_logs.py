"""What every suite's conftest shares (tests/conftest.py, bench/tests/conftest.py): one folder
for the logs of every server a session starts, and the `real` mark on each test that starts one.

It lives here, not in tests/conftest.py, because bench/tests cannot import that file: with
bench/ on the path, `tests.conftest` names bench/tests/conftest.py itself."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `real` every test that runs a provisioned server (llama-server, nginx, the speech
    engines, Home Assistant): they all log to `service_logs`. `scripts/test --fast` skips them."""
    for item in items:
        if "service_logs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real)


@pytest.fixture(scope="session", name="service_logs")
def service_logs_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the logs of every server the session starts (named in failures)."""
    return tmp_path_factory.mktemp("service-logs")
