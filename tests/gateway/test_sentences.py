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
