"""pytest plugin: load phcc 0.13.375 (built for HA 2026.10.4) on HA 2026.11.0.

Use instead of the entry-point plugin:
    pytest -p no:homeassistant -p voice_stack_dev.ha11_phcc tests/integration

Two incompatibilities are bridged: phcc imports respx (and so httpx) before homeassistant,
whose import must alias httpx to httpx2 first; and phcc imports logger's
_clear_logger_overwrites, which HA 2026.11 removed.
"""

from __future__ import annotations

import homeassistant  # noqa: F401 - first, so httpx is aliased before respx imports it
import homeassistant.components.logger as _logger

if not hasattr(_logger, "_clear_logger_overwrites"):
    _logger._clear_logger_overwrites = lambda *args, **kwargs: None  # type: ignore[attr-defined]

from pytest_homeassistant_custom_component.plugins import *  # type: ignore[import-untyped]  # noqa: F403
