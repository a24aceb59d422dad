"""Repair issues for server setups that silently defeat a dedicated slot."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from homeassistant.config_entries import ConfigEntry, ConfigSubentry
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir

from .const import (
    CONF_LLM_HASS_API,
    CONF_MAX_TOKENS,
    CONF_SLOT,
    DEFAULT_MAX_TOKENS,
    DOMAIN,
    ISSUE_CONTEXT_TOO_SMALL,
    ISSUE_NO_TOOL_CALLING,
    ISSUE_SHARED_SLOT,
    ISSUE_SLOT_NOT_RESERVED,
    ISSUE_SLOT_OUT_OF_RANGE,
    ISSUE_UNIFIED_KV,
)


@dataclass(frozen=True, slots=True)
class ContextError:
    """A request of an agent that the server refused as larger than the slot's context."""

    slot: int
    n_prompt: int | None
    n_ctx: int | None
    from_warm: bool  # the warm-up itself (system prompt and tools) did not fit


@dataclass
class ServerState:
    """What one check learned about the server."""

    props: dict[str, Any]
    slots: list[dict[str, Any]]
    proxy_status: dict[str, Any] | None
    unified_kv: bool | None = None
    prefix_tokens: dict[str, int] = field(default_factory=dict)  # subentry -> tokens
    # subentry -> the last refused request; kept until one succeeds or the slot grows.
    context_errors: dict[str, ContextError] = field(default_factory=dict)

    def prune_context_errors(self) -> None:
        """Forget refusals from before the slot's context grew (llama-server restarted)."""
        for sub_id, error in list(self.context_errors.items()):
            n_ctx = self.slot_ctx(error.slot)
            if n_ctx and error.n_ctx and n_ctx > error.n_ctx:
                del self.context_errors[sub_id]

    @property
    def total_slots(self) -> int:
        """Number of server slots (-np)."""
        return int(self.props.get("total_slots") or 0)

    def slot_ctx(self, slot: int) -> int | None:
        """Context size of one slot, from /slots."""
        for entry in self.slots:
            if entry.get("id") == slot and isinstance(entry.get("n_ctx"), int):
                return int(entry["n_ctx"])
        return None

    @property
    def tool_calling(self) -> bool:
        """Whether the chat template can call tools."""
        caps = self.props.get("chat_template_caps")
        if not isinstance(caps, dict) or "supports_tool_calls" not in caps:
            return True  # older builds do not say; do not cry wolf
        return bool(caps["supports_tool_calls"])


def agent_subentries(entry: ConfigEntry) -> list[ConfigSubentry]:
    """The agents (conversation and AI Task subentries) of an entry."""
    return [s for s in entry.subentries.values() if CONF_SLOT in s.data]


def _issue_prefix(entry: ConfigEntry) -> str:
    return f"{entry.entry_id}_"


def find_issues(entry: ConfigEntry, state: ServerState) -> dict[str, tuple[str, dict[str, str]]]:
    """Return {issue_id: (translation_key, placeholders)} for everything wrong."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    prefix = _issue_prefix(entry)
    agents = agent_subentries(entry)
    if not agents:
        return found
    if state.unified_kv:
        found[f"{prefix}{ISSUE_UNIFIED_KV}"] = (
            ISSUE_UNIFIED_KV,
            {"slots": str(state.total_slots or 4)},
        )
    by_slot: dict[int, list[ConfigSubentry]] = defaultdict(list)
    for agent in agents:
        by_slot[int(agent.data[CONF_SLOT])].append(agent)
    for slot, sharing in by_slot.items():
        if len(sharing) > 1:
            found[f"{prefix}{ISSUE_SHARED_SLOT}_{slot}"] = (
                ISSUE_SHARED_SLOT,
                {"slot": str(slot), "agents": ", ".join(sorted(a.title for a in sharing))},
            )
    reserved = _reserved(state.proxy_status)
    for agent in agents:
        _agent_issues(found, prefix, agent, state, reserved)
    return found


def _reserved(proxy_status: dict[str, Any] | None) -> set[int] | None:
    if proxy_status is None:
        return None
    raw = proxy_status.get("reserved_slots")
    return {int(s) for s in raw if isinstance(s, int)} if isinstance(raw, list) else None


def _agent_issues(
    found: dict[str, tuple[str, dict[str, str]]],
    prefix: str,
    agent: ConfigSubentry,
    state: ServerState,
    reserved: set[int] | None,
) -> None:
    slot = int(agent.data[CONF_SLOT])
    key = f"{prefix}{agent.subentry_id}_"
    names = {"agent": agent.title, "slot": str(slot)}
    if state.total_slots and slot >= state.total_slots:
        found[key + ISSUE_SLOT_OUT_OF_RANGE] = (
            ISSUE_SLOT_OUT_OF_RANGE,
            {**names, "total": str(state.total_slots), "max": str(state.total_slots - 1)},
        )
    if agent.data.get(CONF_LLM_HASS_API) and not state.tool_calling:
        found[key + ISSUE_NO_TOOL_CALLING] = (ISSUE_NO_TOOL_CALLING, names)
    if reserved is not None and slot not in reserved:
        found[key + ISSUE_SLOT_NOT_RESERVED] = (
            ISSUE_SLOT_NOT_RESERVED,
            {**names, "reserved": ",".join(map(str, sorted(reserved))) or "none"},
        )
    tokens = state.prefix_tokens.get(agent.subentry_id)
    n_ctx = state.slot_ctx(slot)
    needed = (tokens or 0) + int(agent.data.get(CONF_MAX_TOKENS, DEFAULT_MAX_TOKENS))
    if (error := state.context_errors.get(agent.subentry_id)) is not None:
        found[key + ISSUE_CONTEXT_TOO_SMALL] = (
            ISSUE_CONTEXT_TOO_SMALL,
            _context_placeholders(agent, error),
        )
    elif tokens and n_ctx and needed > n_ctx:
        found[key + ISSUE_CONTEXT_TOO_SMALL] = (
            ISSUE_CONTEXT_TOO_SMALL,
            {**names, "needed": str(needed), "n_ctx": str(n_ctx)},
        )


@callback
def async_apply_issues(
    hass: HomeAssistant, entry: ConfigEntry, found: dict[str, tuple[str, dict[str, str]]]
) -> None:
    """Create the issues found; delete this entry's issues that went away."""
    registry = ir.async_get(hass)
    prefix = _issue_prefix(entry)
    for (domain, issue_id), _ in list(registry.issues.items()):
        if domain == DOMAIN and issue_id.startswith(prefix) and issue_id not in found:
            ir.async_delete_issue(hass, DOMAIN, issue_id)
    for issue_id, (key, placeholders) in found.items():
        ir.async_create_issue(
            hass,
            DOMAIN,
            issue_id,
            is_fixable=False,
            severity=ir.IssueSeverity.WARNING,
            translation_key=key,
            translation_placeholders=placeholders,
        )


def _context_placeholders(agent: ConfigSubentry, error: ContextError) -> dict[str, str]:
    return {
        "agent": agent.title,
        "slot": str(error.slot),
        "needed": str(error.n_prompt or "?"),
        "n_ctx": str(error.n_ctx or "?"),
    }


@callback
def report_context_too_small(
    hass: HomeAssistant, entry: ConfigEntry, agent: ConfigSubentry, error: ContextError
) -> None:
    """Raise the context issue from a refused request (find_issues keeps it afterwards)."""
    ir.async_create_issue(
        hass,
        DOMAIN,
        f"{_issue_prefix(entry)}{agent.subentry_id}_{ISSUE_CONTEXT_TOO_SMALL}",
        is_fixable=False,
        severity=ir.IssueSeverity.WARNING,
        translation_key=ISSUE_CONTEXT_TOO_SMALL,
        translation_placeholders=_context_placeholders(agent, error),
    )


@callback
def async_clear_entry(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Delete every issue of an entry (on removal)."""
    async_apply_issues(hass, entry, {})
