"""Does llama-server share one KV cache across its slots? A unified cache clears idle slots
whenever another client starts, which silently defeats slot pinning.

/props (b11669) does not say, so it takes a probe: pin A to one slot, B to another, A again;
with a unified cache A's second run re-processes everything. The probe evicts B's slot, so
it runs once per server setup (model, build, slot layout), never on a mere restart: the
verdict is kept per server URL across entry reloads. UnifiedKvProbe decides when to run it and
on which two slots.
"""

from __future__ import annotations

from typing import Any

from homeassistant.core import HomeAssistant
from homeassistant.util.hass_dict import HassKey

from .chat import ChatClient
from .const import DOMAIN, LOGGER
from .errors import ServiceError
from .payloads import ServerProps
from .slots import SlotScheduler

_SYSTEM = "Voice Stack unified KV cache probe."
_TIMEOUT = 30.0
# Server URL -> (the setup the verdict was found for, the verdict).
VERDICTS: HassKey[dict[str, tuple[tuple[object, ...], bool]]] = HassKey(f"{DOMAIN}_unified_kv")


def _probe(text: str, slot: int) -> dict[str, Any]:
    return {
        "messages": [
            {"role": "system", "content": f"{_SYSTEM} {text}"},
            {"role": "user", "content": text},
        ],
        "id_slot": slot,
        "cache_prompt": True,
        "max_tokens": 0,
        "n_predict": 0,
    }


async def probe_unified_kv(chat: ChatClient, slot: int, other: int) -> bool | None:
    """True when a request on `other` cleared `slot`'s cache; None when the probe failed."""
    try:
        await chat.complete(_probe("alpha beta gamma delta", slot), _TIMEOUT)
        await chat.complete(_probe("other", other), _TIMEOUT)
        reply = await chat.complete(_probe("alpha beta gamma delta", slot), _TIMEOUT)
    except ServiceError as err:
        LOGGER.debug("Unified KV probe failed: %s", err)
        return None
    timings = reply.get("timings") or {}
    return bool(timings.get("cache_n", 0) == 0 and timings.get("prompt_n", 0) > 0)


def known_verdict(hass: HomeAssistant, url: str, props: ServerProps) -> tuple[bool, bool | None]:
    """(known, verdict) for this server setup."""
    found = hass.data.get(VERDICTS, {}).get(url)
    if found is not None and found[0] == props.fingerprint:
        return True, found[1]
    return False, None


def remember_verdict(hass: HomeAssistant, url: str, props: ServerProps, verdict: bool) -> None:
    """Keep the verdict for this server setup (a failed probe is not remembered)."""
    hass.data.setdefault(VERDICTS, {})[url] = (props.fingerprint, verdict)


class UnifiedKvProbe:
    """Runs the probe for a server setup it has no verdict for, on two of the agents' slots; a
    failed probe is tried again only on a new server process."""

    def __init__(
        self, hass: HomeAssistant, chat: ChatClient, scheduler: SlotScheduler, url: str
    ) -> None:
        """Probe the server at `url` through `chat`, leasing the slots from `scheduler`."""
        self._hass, self._chat, self._scheduler, self._url = hass, chat, scheduler, url
        self._processes = 0  # server processes seen
        self._failed_for: tuple[object, ...] | None = None

    def new_process(self) -> None:
        """The server started again: a probe that failed may be tried once more."""
        self._processes += 1

    async def check(self, props: ServerProps, slots: set[int]) -> tuple[bool | None, set[int]]:
        """The verdict for this server setup, and the slots among `slots` a new probe disturbed."""
        known, verdict = known_verdict(self._hass, self._url, props)
        disturbed: set[int] = set()
        setup = (props.fingerprint, self._processes)
        if not known and self._failed_for != setup:
            verdict, disturbed = await self._probe(props, slots)
            if verdict is None:
                self._failed_for = setup  # not again for this process
            else:
                remember_verdict(self._hass, self._url, props, verdict)
        return verdict, disturbed & slots

    async def _probe(self, props: ServerProps, slots: set[int]) -> tuple[bool | None, set[int]]:
        """A's slot is the lowest agent slot; B's another agent slot, else the next slot."""
        total = props.total_slots or 0
        ours = sorted(s for s in slots if s < total)
        if total < 2 or not ours:
            return None, set()
        slot = ours[0]
        other = next((s for s in ours if s != slot), (slot + 1) % total)
        lease = self._scheduler.lease
        async with lease((slot,), background=True), lease((other,), background=True):
            return await probe_unified_kv(self._chat, slot, other), {slot, other}
