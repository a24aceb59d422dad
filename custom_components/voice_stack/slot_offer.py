"""Which slots the agent form offers: the ones the auth proxy reserves for voice that no other
agent uses, or, when there is none, what to change on the GPU host (no I/O here).

A slot the proxy does not reserve lets other clients (Open WebUI, scripts) evict the agent's
prompt, and a slot another agent uses is evicted by that agent: neither is suggested or offered
(an agent's own slots stay listed, to keep or unpick). Without the Voice Stack proxy in front
(llama-server itself) nothing is reserved, and every slot of the server counts as reserved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SlotOffer:
    """What the form offers one agent, and the words of its messages."""

    choices: tuple[int, ...]  # listed in the form: the free slots, and the agent's own
    free: tuple[int, ...]  # reserved (or no proxy), below the server's count, no agent's
    error: str | None  # the form's base error when nothing is free (else None)
    placeholders: Mapping[str, str]

    @property
    def default(self) -> list[int]:
        """The pool a new agent is suggested: the lowest free slot (served first), or none."""
        return list(self.free[:1])


def _slots(slots: Iterable[int]) -> str:
    return ",".join(map(str, sorted(slots))) or "none"


def slot_offer(
    total: int,
    reserved: tuple[int, ...] | None,
    others: Iterable[tuple[str, tuple[int, ...]]],
    own: tuple[int, ...] = (),
) -> SlotOffer:
    """The offer for an agent owning `own`, beside the other agents (title, pool), on a server
    of `total` slots behind a proxy reserving `reserved` (None: no Voice Stack proxy)."""
    users = sorted(others, key=lambda user: (min(user[1], default=0), user[0]))
    taken = {slot for _, pool in users for slot in pool}
    kept = set(range(total)) if reserved is None else {s for s in reserved if s < total}
    free = tuple(s for s in range(total) if s in kept and s not in taken)
    placeholders = {
        "taken": ", ".join(f"{title}: {_slots(pool)}" for title, pool in users) or "none",
        "reserved": _slots(kept),
        "total": str(total),
    }
    error = None
    unreserved = [s for s in range(total) if s not in kept and s not in taken]
    if not free and unreserved:  # reserving one more slot of the server is enough
        placeholders["suggested"] = _slots([*kept, unreserved[0]])
        error = "no_reserved_slot_free"
        if not kept:  # it reserves none at all
            error = "no_slot_reserved"
    elif not free:  # the server needs another slot (and the proxy must reserve it)
        error = "no_free_slot"
        placeholders |= {"more": str(total + 1), "new_slot": str(total)}
    return SlotOffer(tuple(sorted({*free, *own})), free, error, placeholders)
