"""voice_stack_bench.e2e.floor: the floor's prompt (what a warm slot holds, what is new) and
where the first sentence of a reply ends."""

from __future__ import annotations

from voice_stack_bench.e2e.floor import first_sentence, split_new_part

SYSTEM = (
    "You are a voice assistant for Home Assistant.\nAnswer questions about the world truthfully."
    "\nRespond simply and to the point in plain text.\n\nCurrent time is 10:41:07. Today's date"
    " is 2026-12-01.\n"
)


def test_new_conversation_keeps_the_instructions_and_moves_the_time_to_the_question() -> None:
    chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who wrote Hamlet?"}]
    cached, request = split_new_part(chat)
    assert cached == [{"role": "system", "content": SYSTEM.split("\n\nCurrent", maxsplit=1)[0]}]
    assert request[:-1] == cached
    assert request[-1] == {
        "role": "user",
        "content": "Current time is 10:41:07. Today's date is 2026-12-01.\n\nWho wrote Hamlet?",
    }


def test_follow_up_finds_the_whole_previous_turn_cached() -> None:
    chat = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
        {"role": "user", "content": "And of Germany?"},
    ]
    cached, request = split_new_part(chat)
    assert [m["content"] for m in cached[1:]] == [chat[1]["content"], chat[2]["content"]]
    assert request[-1]["content"].endswith("\n\nAnd of Germany?")


def test_a_system_text_without_a_time_line_leaves_the_question_alone() -> None:
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert split_new_part(chat)[1][-1] == {"role": "user", "content": "Hi"}


def test_first_sentence_ends_at_a_stop_followed_by_space_or_the_end() -> None:
    assert first_sentence("The capital is Paris. It is big.") == "The capital is Paris."
    assert first_sentence("Water boils at 100.5 degrees! Yes.") == "Water boils at 100.5 degrees!"
    assert first_sentence("Is it? Maybe") == "Is it?"
    assert first_sentence("no stop at all") == "no stop at all"
    assert first_sentence("There are 7. Yes.") == "There are 7."
    assert first_sentence("It is 3.") == "It is 3."  # all of it: "3." may still go on as 3.5
