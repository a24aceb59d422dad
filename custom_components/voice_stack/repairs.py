"""Every repair issue of an entry, recomputed from the latest facts whenever one changes.

Facts come from the coordinators (what the server, the proxy and the gateway report), the
agents' options, and what the warm-up and the agents' requests learned (the probe's verdict,
the primed prefix sizes, requests the server refused as too long). One id scheme:
`{entry_id}_{key}` for the server, `{entry_id}_{subentry_id}_{key}` for an agent and
`{entry_id}_{key}_{slot}` for a slot; each issue names the exact flag or setting to change
and is deleted as soon as the facts no longer show it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from homeassistant.config_entries import ConfigEntry
from homeassistant.core import HomeAssistant, callback
from homeassistant.helpers import issue_registry as ir

from .agent import Agent
from .const import (
    CONF_URL,
    DOCS_URL,
    DOMAIN,
    ISSUE_CONTEXT_TOO_SMALL,
    ISSUE_GENERAL_KEY,
    ISSUE_METRICS_DISABLED,
    ISSUE_NO_TOOL_CALLING,
    ISSUE_PROXY_OPEN,
    ISSUE_PROXY_SLOT_COUNT,
    ISSUE_SERVER_OPEN,
    ISSUE_SHARED_SLOT,
    ISSUE_SLOT_NOT_RESERVED,
    ISSUE_SLOT_OUT_OF_RANGE,
    ISSUE_SLOTS_DISABLED,
    ISSUE_UNIFIED_KV,
)
from .coordinator import LlamaCoordinator, ProxyCoordinator
from .payloads import LlamaData, ProxyData
from .urls import without_userinfo


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem to show, with the words that fill its translated text."""

    key: str
    placeholders: Mapping[str, str]
    agent_id: str | None = None
    slot: int | None = None
    severity: ir.IssueSeverity = ir.IssueSeverity.WARNING

    def issue_id(self, entry_id: str) -> str:
        """The id in HA's issue registry."""
        middle = f"_{self.agent_id}" if self.agent_id else ""
        tail = f"_{self.slot}" if self.slot is not None else ""
        return f"{entry_id}{middle}_{self.key}{tail}"


@dataclass(frozen=True, slots=True)
class ContextError:
    """A request of an agent that the server refused as larger than the slot's context."""

    slot: int
    n_prompt: int | None
    n_ctx: int | None
    from_warm: bool  # the warm-up itself (system prompt and tools) did not fit


@dataclass(slots=True)
class Findings:
    """What the warm-up and the requests learned, beside what the coordinators poll."""

    unified_kv: bool | None = None
    prefix_tokens: dict[str, int] = field(default_factory=dict)  # agent id -> tokens
    context_errors: dict[str, ContextError] = field(default_factory=dict)  # agent id -> error


def server_issues(entry: ConfigEntry, llm: LlamaData | None, found: Findings) -> list[Issue]:
    """llama-server started with settings that defeat the slots or hide the sensors."""
    issues: list[Issue] = []
    if found.unified_kv:
        slots = str((llm.total_slots if llm else None) or 4)
        issues.append(Issue(ISSUE_UNIFIED_KV, {"slots": slots}))
    if llm is not None and not llm.loading:
        title = {"title": entry.title}
        if not llm.metrics_enabled:
            issues.append(Issue(ISSUE_METRICS_DISABLED, title))
        if not llm.slots_enabled:
            issues.append(Issue(ISSUE_SLOTS_DISABLED, title))
    return issues


def proxy_issues(entry: ConfigEntry, proxy: ProxyData | None, llm: LlamaData | None) -> list[Issue]:
    """A door open without the key, the general key in the agents' hands, a slot-count clash."""
    if proxy is None:
        return []
    issues: list[Issue] = []
    url = {"url": without_userinfo(entry.data[CONF_URL])}
    if proxy.lets_requests_through:
        # No /proxy/status: the URL is llama-server itself, so the open door is a server
        # started without --api-key rather than a misconfigured proxy.
        key = ISSUE_SERVER_OPEN if proxy.status is None else ISSUE_PROXY_OPEN
        issues.append(Issue(key, url, severity=ir.IssueSeverity.ERROR))
    status = proxy.status
    if status is None:
        return issues
    if status.scoped_keys and status.key_scope == "general":
        issues.append(Issue(ISSUE_GENERAL_KEY, {**url, "docs": f"{DOCS_URL}/deploy.md"}))
    server_slots = llm.total_slots if llm else None
    if status.total_slots is not None and server_slots and status.total_slots != server_slots:
        issues.append(
            Issue(
                ISSUE_PROXY_SLOT_COUNT,
                {"proxy_slots": str(status.total_slots), "server_slots": str(server_slots)},
            )
        )
    return issues


def shared_slot_issues(agents: Iterable[Agent]) -> list[Issue]:
    """Two agents whose pools overlap evict each other's cached prompt."""
    by_slot: dict[int, list[str]] = defaultdict(list)
    for agent in agents:
        for slot in agent.slots:
            by_slot[slot].append(agent.title)
    return [
        Issue(
            ISSUE_SHARED_SLOT, {"slot": str(slot), "agents": ", ".join(sorted(titles))}, slot=slot
        )
        for slot, titles in sorted(by_slot.items())
        if len(titles) > 1
    ]


def agent_issues(
    agent: Agent, llm: LlamaData | None, proxy: ProxyData | None, found: Findings
) -> list[Issue]:
    """What is wrong for one agent: its slots, its tools, its context."""
    names = {"agent": agent.title, "slot": ",".join(map(str, agent.slots))}
    issues: list[Issue] = []
    total = llm.total_slots if llm else None
    if total and (outside := [s for s in agent.slots if s >= total]):
        issues.append(
            Issue(
                ISSUE_SLOT_OUT_OF_RANGE,
                {
                    **names,
                    "slot": ",".join(map(str, outside)),
                    "total": str(total),
                    "max": str(total - 1),
                },
                agent.id,
            )
        )
    props = llm.props if llm else None
    if agent.llm_apis and props is not None and props.tool_calling is False:
        issues.append(Issue(ISSUE_NO_TOOL_CALLING, names, agent.id))
    reserved = proxy.status.reserved_slots if proxy and proxy.status else None
    if reserved is not None and (missing := [s for s in agent.slots if s not in reserved]):
        placeholders = {
            **names,
            "slot": ",".join(map(str, missing)),
            "reserved": ",".join(map(str, reserved)) or "none",
        }
        issues.append(Issue(ISSUE_SLOT_NOT_RESERVED, placeholders, agent.id))
    if (context := context_issue(agent, llm, found)) is not None:
        issues.append(context)
    return issues


def context_issue(agent: Agent, llm: LlamaData | None, found: Findings) -> Issue | None:
    """The slot is too small for the agent's prompt plus reply, as refused or as primed."""
    n_ctx = _context_per_slot(llm)
    error = found.context_errors.get(agent.id)
    if error is not None and _outgrown(error, n_ctx):
        error = None
    total = llm.total_slots if llm else None
    if error is not None:
        needed = error.n_prompt + agent.max_tokens if error.n_prompt else None
        return _context_too_small(agent, error.slot, needed, error.n_ctx, total)
    tokens = found.prefix_tokens.get(agent.id)
    needed = (tokens or 0) + agent.max_tokens
    if tokens and n_ctx and needed > n_ctx:
        return _context_too_small(agent, agent.slots[0], needed, n_ctx, total)
    return None


def _context_per_slot(llm: LlamaData | None) -> int | None:
    return llm.slots.context_per_slot if llm and llm.slots else None


def _outgrown(error: ContextError, n_ctx: int | None) -> bool:
    """llama-server restarted with larger slots than the refused request met."""
    return bool(n_ctx and error.n_ctx and n_ctx > error.n_ctx)


def _context_too_small(
    agent: Agent, slot: int, needed: int | None, n_ctx: int | None, total: int | None
) -> Issue:
    """The repair with the figures to set: LLM_CTX_PER_SLOT (compose), and -c (-np slots)."""
    per_slot = -(-needed // 1024) * 1024 if needed else None  # rounded up to a round figure
    placeholders = {
        "agent": agent.title,
        "slot": str(slot),
        "needed": str(needed or "?"),
        "n_ctx": str(n_ctx or "?"),
        "per_slot": str(per_slot or "?"),
        "slots": str(total or "?"),
        "ctx_size": str(per_slot * total) if per_slot and total else "?",
    }
    return Issue(ISSUE_CONTEXT_TOO_SMALL, placeholders, agent.id)


@callback
def apply_issues(hass: HomeAssistant, entry: ConfigEntry, issues: Iterable[Issue]) -> None:
    """Create the issues given; delete every other issue of this entry."""
    wanted = {issue.issue_id(entry.entry_id): issue for issue in issues}
    registry = ir.async_get(hass)
    for domain, issue_id in list(registry.issues):
        # `entry_id in` also catches ids of the older `{key}_{entry_id}` scheme
        if domain == DOMAIN and entry.entry_id in issue_id and issue_id not in wanted:
            ir.async_delete_issue(hass, DOMAIN, issue_id)
    for issue_id, issue in wanted.items():
        ir.async_create_issue(
            hass,
            DOMAIN,
            issue_id,
            is_fixable=False,
            severity=issue.severity,
            translation_key=issue.key,
            translation_placeholders=dict(issue.placeholders),
        )


class Repairs:
    """Owns the issues of one entry: keeps the findings and re-applies on every change."""

    def __init__(
        self,
        hass: HomeAssistant,
        entry: ConfigEntry,
        llm: LlamaCoordinator,
        proxy: ProxyCoordinator,
        agents: Mapping[str, Agent],
    ) -> None:
        """Read the coordinators' latest data and these agents."""
        self._hass = hass
        self._entry = entry
        self._llm = llm
        self._proxy = proxy
        self._agents = agents
        self.findings = Findings()

    @callback
    def async_start(self) -> None:
        """Re-apply after every poll of the server or the proxy, until the entry unloads."""
        for coordinator in (self._llm, self._proxy):
            self._entry.async_on_unload(coordinator.async_add_listener(self.sync))
        self.sync()

    @callback
    def sync(self) -> None:
        """Forget what the facts outdated, compute every issue from them and apply them."""
        llm, proxy, found = self._llm.data, self._proxy.data, self.findings
        n_ctx = _context_per_slot(llm)
        for agent_id, error in list(found.context_errors.items()):
            if _outgrown(error, n_ctx):
                del found.context_errors[agent_id]
        issues = [
            *server_issues(self._entry, llm, found),
            *proxy_issues(self._entry, proxy, llm),
            *shared_slot_issues(self._agents.values()),
        ]
        for agent in self._agents.values():
            issues += agent_issues(agent, llm, proxy, found)
        apply_issues(self._hass, self._entry, issues)

    @callback
    def context_error(self, agent: Agent, error: ContextError) -> None:
        """A request of the agent did not fit its slot: raise the repair and keep it."""
        self.findings.context_errors[agent.id] = error
        self.sync()

    @callback
    def request_ok(self, agent: Agent) -> None:
        """A request of the agent fitted its slot: drop its context repair."""
        if self._forget_context_error(agent, from_warm=False):
            self.sync()

    @callback
    def primed(self, agent: Agent, tokens: int) -> None:
        """The agent's stable prefix takes `tokens` in its slot (a warm-up that fitted drops
        only a context repair a warm-up raised)."""
        self.findings.prefix_tokens[agent.id] = tokens
        self._forget_context_error(agent, from_warm=True)
        self.sync()

    def _forget_context_error(self, agent: Agent, *, from_warm: bool) -> bool:
        """Drop the agent's context error (only a warm-up's when `from_warm`); True if gone."""
        error = self.findings.context_errors.get(agent.id)
        if error is None or (from_warm and not error.from_warm):
            return False
        del self.findings.context_errors[agent.id]
        return True

    @callback
    def unified_kv(self, verdict: bool | None) -> None:
        """What the unified-KV probe found (None: not known)."""
        self.findings.unified_kv = verdict
        self.sync()


@callback
def clear_issues(hass: HomeAssistant, entry: ConfigEntry) -> None:
    """Delete every issue of an entry (on removal)."""
    apply_issues(hass, entry, ())
