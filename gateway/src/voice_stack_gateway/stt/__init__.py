"""Speech to text: a connection's STT requests (handler.py), each utterance a turn whose end is
decided in one place (turn.py)."""

from .handler import SttHandler

__all__ = ["SttHandler"]
