"""Repair issues for server-side settings the user must change, raised from the health polls.

Each issue names the exact flag or setting; it is deleted again as soon as a poll finds
the problem fixed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from homeassistant.helpers import issue_registry as ir

from .client import without_userinfo
from .const import CONF_URL, DOMAIN

if TYPE_CHECKING:
    from homeassistant.config_entries import ConfigEntry
    from homeassistant.core import HomeAssistant

    from .coordinator import LlamaData, ProxyData

ISSUE_METRICS_DISABLED: Final = "metrics_disabled"
ISSUE_SLOTS_DISABLED: Final = "slots_endpoint_disabled"
ISSUE_PROXY_OPEN: Final = "proxy_accepts_without_key"
ISSUE_SERVER_OPEN: Final = "server_has_no_api_key"
ISSUE_PROXY_SLOT_COUNT: Final = "proxy_slot_count_mismatch"
ALL_ISSUES: Final = (
    ISSUE_METRICS_DISABLED,
    ISSUE_SLOTS_DISABLED,
    ISSUE_PROXY_OPEN,
    ISSUE_SERVER_OPEN,
    ISSUE_PROXY_SLOT_COUNT,
)


def issue_id(key: str, entry: ConfigEntry) -> str:
    """Issue ids are per config entry: two servers can each have the problem."""
    return f"{key}_{entry.entry_id}"


def _set(
    hass: HomeAssistant,
    entry: ConfigEntry,
    key: str,
    active: bool,
    *,
    severity: ir.IssueSeverity = ir.IssueSeverity.WARNING,
    placeholders: dict[str, str] | None = None,
) -> None:
    if not active:
        ir.async_delete_issue(hass, DOMAIN, issue_id(key, entry))
        return
    ir.async_create_issue(
        hass,
        DOMAIN,
        issue_id(key, entry),
        is_fixable=False,
        severity=severity,
        translation_key=key,
        translation_placeholders={"title": entry.title, **(placeholders or {})},
    )


def sync_server_issues(hass: HomeAssistant, entry: ConfigEntry, data: LlamaData) -> None:
    """llama-server started without the endpoints the sensors read."""
    _set(hass, entry, ISSUE_METRICS_DISABLED, not data.metrics_enabled)
    _set(hass, entry, ISSUE_SLOTS_DISABLED, not data.slots_enabled)


def sync_proxy_issues(
    hass: HomeAssistant, entry: ConfigEntry, data: ProxyData, server_slots: int | None
) -> None:
    """A proxy that lets requests without the key through, or disagrees on the slot count."""
    # No /proxy/status: the URL is llama-server itself (or a foreign proxy), so the open
    # door is a server started without --api-key rather than a misconfigured proxy.
    direct = data.status is None
    for key, active in (
        (ISSUE_PROXY_OPEN, data.lets_requests_through and not direct),
        (ISSUE_SERVER_OPEN, data.lets_requests_through and direct),
    ):
        _set(
            hass,
            entry,
            key,
            active,
            severity=ir.IssueSeverity.ERROR,
            placeholders={"url": without_userinfo(entry.data[CONF_URL])},
        )
    proxy_slots = data.status.total_slots if data.status else None
    mismatch = proxy_slots is not None and server_slots is not None and proxy_slots != server_slots
    _set(
        hass,
        entry,
        ISSUE_PROXY_SLOT_COUNT,
        mismatch,
        placeholders={"proxy_slots": str(proxy_slots), "server_slots": str(server_slots)},
    )


def async_clear_entry(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Drop this module's issues of a removed entry."""
    for key in ALL_ISSUES:
        ir.async_delete_issue(hass, DOMAIN, issue_id(key, entry))
