"""sentences.py: incremental splitting of streamed text."""

from __future__ import annotations

from voice_stack_gateway.sentences import SentenceSplitter


def split_stream(*deltas: str) -> list[str]:
    splitter = SentenceSplitter(max_chars=60)
    out: list[str] = []
    for delta in deltas:
        out += splitter.add(delta)
    return out + splitter.finish()


def test_sentences_incremental() -> None:
    s = SentenceSplitter()
    assert s.add("Sure, I turned") == []
    assert s.add(" on the light.") == ["Sure, I turned on the light."]  # delta ends at '.'
    assert s.add(" Dr. Smith paid 3.5 dollars") == []
    assert s.add(" today! Anything") == ["Dr. Smith paid 3.5 dollars today!"]
    assert s.finish() == ["Anything"]


def test_spaces_numbers_and_cjk() -> None:
    assert split_stream("Todo ", "listo. ", "¿Algo más?") == ["Todo listo.", "¿Algo más?"]
    assert split_stream("It cost 3.", "5 euros.") == ["It cost 3.5 euros."]
    quoted = "\u300cこんにちは。\u300d元気\uff1f"
    assert split_stream(quoted) == ["\u300cこんにちは。", "\u300d元気\uff1f"]


def test_run_on_text_is_cut_and_blank_text_dropped() -> None:
    long = split_stream("word " * 30)
    assert len(long) == 3
    assert all(len(p) <= 60 for p in long)
    assert split_stream("", "   ") == []


def test_a_number_ends_a_sentence_before_a_line_break_and_a_blank_line_ends_a_piece() -> None:
    assert split_stream("The answer is 8.\n\nThe spider has 8 legs.") == [
        "The answer is 8.",
        "The spider has 8 legs.",
    ]
    assert split_stream("The answer is 8", ".", "\n\n", "Yes") == ["The answer is 8.", "Yes"]
    assert split_stream("Version 8. 5 users") == ["Version 8. 5 users"]  # a space: may go on
    assert split_stream("The original text is:\n\n", '"News') == ["The original text is:", '"News']


def test_only_the_first_piece_is_cut_at_a_clause_of_three_words_or_more() -> None:
    text = "The capital is Paris, a big city. It has a river, the Seine, and bridges."
    assert split_stream(text) == [
        "The capital is Paris,",
        "a big city.",
        "It has a river, the Seine, and bridges.",
    ]
    assert split_stream("Sure, I turned on the light.") == ["Sure, I turned on the light."]
    # "Well, yes" is two words: the first clause mark after three is the cut
    assert split_stream("Well, yes: it rains, ", "a lot.") == ["Well, yes: it rains,", "a lot."]


def test_work_grows_with_the_text_not_its_square() -> None:
    """One synthesize-chunk may carry a megabyte with no sentence end: each abbreviation skipped
    used to rescan (and copy) the whole buffer, so 80 KB of "e.g. " held the event loop 8 s."""
    work = []
    for n in (4_000, 16_000):
        splitter = SentenceSplitter()
        pieces = splitter.add("e.g. " * n) + splitter.finish()
        assert "".join(pieces).replace(" ", "") == "e.g." * n  # nothing lost
        assert all(len(p) <= 400 for p in pieces)
        work.append(splitter.scanned)
    assert work[1] <= 4.2 * work[0]  # linear: 4x the text, 4x the work
    assert work[1] <= 1.1 * 5 * 16_000


def test_a_long_sentence_end_past_the_limit_is_cut_like_a_run_on_sentence() -> None:
    text = "word " * 100 + "end. Next."
    pieces = split_stream(text)
    assert all(len(p) <= 60 for p in pieces)
    assert " ".join(pieces).split() == text.split()
