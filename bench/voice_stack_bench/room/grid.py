"""What the speech detector bench (bench/vad_bench.py) measures: every room, with no noise and with
each noise kind at each SNR (a cell), and in each cell a rotating few of the cut-off corpus's
utterances, the same number of each class, in rotating voices; and, where the grid asks for them,
a rotating few human recordings (recorded.py, class "complete", voice RECORDED) after them.

The rotation walks each class's utterances and the voices on from one cell to the next, so over
the grid every utterance is heard, in every room and noise kind, in each voice about as often;
a scene's noise seed is fixed by its cell and its place in it, so a run hears what the last heard.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from voice_stack_bench.endpoint.corpus import Corpus, Entry

from .acoustics import ROOMS
from .noise import KINDS
from .voices import ESPEAK_VOICES

PIPER = "piper"  # the speech server's piper voice (joe), spoken through corpus.speak()
VOICES = (PIPER, *ESPEAK_VOICES)
RECORDED = "recorded"  # human speech, recorded (recorded.py): its own utterances, in no other voice
QUIET = "none"  # the noise kind of a cell without noise
SNRS_DB = (5, 10, 15, 20, 30)
CLASSES = ("complete", "pause_cannot_end", "pause_looks_complete")


@dataclass(frozen=True)
class Cell:
    """A room under a noise at an SNR (noise QUIET: no noise, snr_db None)."""

    room: str
    noise: str
    snr_db: int | None

    @property
    def snr(self) -> str:
        return "quiet" if self.snr_db is None else str(self.snr_db)

    @property
    def name(self) -> str:
        return f"{self.room}/{self.noise}" + ("" if self.snr_db is None else f"@{self.snr_db}")


@dataclass(frozen=True)
class Planned:
    """One scene to measure: an utterance in a voice in a cell, and its noise's seed."""

    cell: Cell
    entry: Entry
    voice: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.cell.name}/{self.entry.id}/{self.voice}"


@dataclass(frozen=True)
class Grid:
    rooms: tuple[str, ...]
    kinds: tuple[str, ...]  # noise kinds besides QUIET
    snrs_db: tuple[int, ...]
    per_class: int  # utterances of each class in a cell
    entry_ids: tuple[str, ...] | None = None  # the corpus's utterances to rotate (None: all)
    recorded_per_cell: int = 0  # human recordings in a cell, after the corpus's utterances

    def cells(self) -> list[Cell]:
        out = []
        for room in self.rooms:
            out.append(Cell(room, QUIET, None))
            out += [Cell(room, kind, snr) for kind in self.kinds for snr in self.snrs_db]
        return out

    def plan(self, entries: tuple[Entry, ...], recorded: tuple[Entry, ...] = ()) -> list[Planned]:
        """Every cell's scenes: cell i takes the next `per_class` utterances of each class; an
        utterance heard for the k-th time, in slot s of its cell, takes the voice (k + s) mod
        the voices (so each utterance goes through every voice, and a cell mixes them). Then
        it takes the next `recorded_per_cell` of the `recorded` utterances, in their own voice
        RECORDED (the corpus's scenes stay as they are without them)."""
        if self.recorded_per_cell and not recorded:
            raise ValueError("the grid asks for recorded utterances and none are given")
        chosen = [e for e in entries if self.entry_ids is None or e.id in self.entry_ids]
        by_class = {kind: [e for e in chosen if e.kind == kind] for kind in CLASSES}
        if not all(by_class.values()):
            raise ValueError("the grid needs at least one utterance of each class")
        heard: Counter[str] = Counter()
        out = []
        for i, cell in enumerate(self.cells()):
            slot = 0
            for kind in CLASSES:
                pool = by_class[kind]
                for j in range(self.per_class):
                    entry = pool[(i * self.per_class + j) % len(pool)]
                    voice = VOICES[(heard[entry.id] + slot) % len(VOICES)]
                    out.append(Planned(cell, entry, voice, seed=i * 16 + slot))
                    heard[entry.id] += 1
                    slot += 1
            for j in range(self.recorded_per_cell):
                entry = recorded[(i * self.recorded_per_cell + j) % len(recorded)]
                out.append(Planned(cell, entry, RECORDED, seed=i * 16 + slot))
                slot += 1
        return out

    def describe(self) -> str:
        scope = "every utterance" if self.entry_ids is None else ", ".join(self.entry_ids)
        recorded = (
            f"; and {self.recorded_per_cell} human recording(s) rotating (voice {RECORDED})"
            if self.recorded_per_cell else ""
        )  # fmt: skip
        return (
            f"{len(self.cells())} cells (rooms {', '.join(self.rooms)}; no noise, and "
            f"{', '.join(self.kinds)} at {', '.join(map(str, self.snrs_db))} dB), each with "
            f"{self.per_class} utterance(s) of each class rotating over {scope}, voices rotating"
            f"{recorded}"
        )


def grid_for(quick: bool, corpus: Corpus) -> Grid:
    """The default grid, or --quick's: one room, a steady noise and babble at 10 dB, the corpus's
    quick subset (a smoke test); in each cell as many human recordings as utterances of a class."""
    if quick:
        return Grid(("living",), ("hvac", "babble"), (10,), per_class=1, entry_ids=corpus.quick,
                    recorded_per_cell=1)  # fmt: skip
    return Grid(tuple(ROOMS), KINDS, SNRS_DB, per_class=2, recorded_per_cell=2)
