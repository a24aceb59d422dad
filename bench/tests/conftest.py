"""The benches' tests: `service_logs` and the `real` mark, as in tests/conftest.py."""

from __future__ import annotations

from voice_stack_dev.service_logs import (  # noqa: F401 - a hook and a fixture, found by name
    pytest_collection_modifyitems,
    service_logs_fixture,
)
