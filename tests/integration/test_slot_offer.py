"""Which slots the agent form offers, on given facts (the flows run it against the real proxy in
test_agent_flow.py)."""

from __future__ import annotations

from custom_components.voice_stack.slot_offer import slot_offer


def test_without_a_proxy_every_free_slot_of_the_server() -> None:
    offer = slot_offer(4, None, [("Assistant", (0,))])
    assert (offer.choices, offer.default, offer.error) == ((1, 2, 3), [1], None)
    assert offer.placeholders["reserved"] == "0,1,2,3"


def test_only_reserved_slots_no_other_agent_uses() -> None:
    """Reserved slots past the server's count do not exist; the lowest free one is suggested."""
    offer = slot_offer(4, (0, 2, 3, 7), [("Assistant", (0,))])
    assert (offer.choices, offer.default) == ((2, 3), [2])


def test_the_agents_own_slots_stay_listed_even_unreserved() -> None:
    """Reconfigure: an agent on an unreserved slot can keep it or unpick it (its repair says
    why); nothing is free, but it has its own, so there is no error for it to act on."""
    offer = slot_offer(4, (0,), [("Assistant", (0,))], own=(1,))
    assert (offer.choices, offer.free) == ((1,), ())
    assert offer.error == "no_reserved_slot_free"  # the flow shows it only without own slots


def test_every_reserved_slot_taken_suggests_one_more() -> None:
    offer = slot_offer(4, (0, 1), [("Tasks", (1,)), ("Assistant", (0,))])
    assert (offer.choices, offer.default, offer.error) == ((), [], "no_reserved_slot_free")
    assert offer.placeholders == {
        "taken": "Assistant: 0, Tasks: 1",
        "reserved": "0,1",
        "total": "4",
        "suggested": "0,1,2",
    }


def test_every_slot_taken_asks_for_another_slot() -> None:
    """All four slots are agents' (one of them, unreserved, with its repair): the server needs
    a fifth, and the proxy must reserve it."""
    others = [("Kitchen", (1, 2)), ("Assistant", (0,)), ("Rogue", (3,))]
    offer = slot_offer(4, (0, 1, 2), others)
    assert offer.error == "no_free_slot"
    assert (offer.placeholders["more"], offer.placeholders["new_slot"]) == ("5", "4")
    assert offer.placeholders["taken"] == "Assistant: 0, Kitchen: 1,2, Rogue: 3"


def test_a_proxy_reserving_nothing() -> None:
    offer = slot_offer(2, (), [])
    assert (offer.error, offer.placeholders["reserved"], offer.placeholders["suggested"]) == (
        "no_slot_reserved",
        "none",
        "0",
    )
