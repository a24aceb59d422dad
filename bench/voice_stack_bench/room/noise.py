"""Room noise, made here from seeds so every run hears the same: steady (a fan's pink noise, an
HVAC's low rumble), other voices (babble), a TV (a voice over music) and transients (dishes, a
door). Voices for babble and the TV come from espeak-ng (voices.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.signal import butter, sosfilt  # type: ignore[import-untyped]

from .acoustics import RATE

type Talk = Callable[[str, str], np.ndarray]  # (voice, text) -> float speech at RATE

BABBLE = (
    ("en-us+m1", "Did you see the match last night, it went to penalties in the end."),
    ("en-gb+f2", "I think we should paint the hallway before the weekend, don't you."),
    ("en-us+f4", "The bakery on the corner closes early on Sundays, so go before noon."),
    ("en-gb+m4", "My brother is coming over later with the kids and the dog as well."),
)
TV = ("en-us+m2", "And now the weather. A band of rain moves in from the west tonight, "
      "clearing by morning, with sunny spells and highs of fourteen degrees tomorrow.")  # fmt: skip


def pink(n: int, rng: np.random.Generator) -> np.ndarray:
    """1/f noise: a fan, a fridge, a room's air."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1))
    return np.fft.irfft(spectrum, n)


def hvac(n: int, rng: np.random.Generator) -> np.ndarray:
    """Low-passed noise under 400 Hz with a faint 100 Hz hum: heating, air conditioning."""
    rumble = sosfilt(butter(4, 400, "low", fs=RATE, output="sos"), rng.standard_normal(n))
    hum = 0.3 * np.std(rumble) * np.sin(2 * np.pi * 100 * np.arange(n) / RATE)
    return np.asarray(rumble + hum)


def _loop(signal: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """`signal` repeated to n samples from a random start."""
    start = int(rng.integers(len(signal)))
    return np.resize(np.roll(signal, -start), n)


def _unit(signal: np.ndarray) -> np.ndarray:
    return np.asarray(signal / (np.sqrt(np.mean(signal**2)) + 1e-12))


def babble(n: int, rng: np.random.Generator, talk: Talk) -> np.ndarray:
    """Four other people talking at once across the room."""
    return np.sum([_unit(_loop(talk(v, t), n, rng)) for v, t in BABBLE], axis=0)


def music(n: int, rng: np.random.Generator) -> np.ndarray:
    """A chord progression with a beat: harmonics of four chords, half a second each."""
    chords = ((220.0, 277.2, 329.6), (196.0, 246.9, 293.7), (174.6, 220.0, 261.6),
              (196.0, 246.9, 311.1))  # fmt: skip
    t = np.arange(RATE // 2) / RATE
    envelope = np.exp(-3 * t)
    bars = [sum(np.sin(2 * np.pi * f * k * t) / k for f in c for k in (1, 2, 3)) * envelope
            for c in chords]  # fmt: skip
    return _loop(np.asarray(np.concatenate(bars)), n, rng)


def tv(n: int, rng: np.random.Generator, talk: Talk) -> np.ndarray:
    """A presenter over music, as a TV or a radio in the room plays them."""
    return _unit(_loop(talk(*TV), n, rng)) + 0.5 * _unit(music(n, rng))


def dishes(n: int, rng: np.random.Generator) -> np.ndarray:
    """Plates and cutlery: short ringing clinks about twice a second, and a door now and then."""
    out = np.zeros(n)
    t = np.arange(RATE // 4) / RATE
    for at in np.cumsum(rng.exponential(0.5 * RATE, size=n // (RATE // 4) + 1)).astype(int):
        if at >= n:
            break
        freq = rng.uniform(2000, 5000)
        clink = np.sin(2 * np.pi * freq * t) * np.exp(-t * rng.uniform(15, 40))
        end = min(n, at + len(clink))
        out[at:end] += clink[: end - at] * rng.uniform(0.3, 1.0)
    for at in range(int(rng.integers(RATE)), n, 4 * RATE):  # a door every 4 s
        thud = sosfilt(butter(2, 150, "low", fs=RATE, output="sos"), rng.standard_normal(RATE // 5))
        out[at : at + len(thud)] += 4 * thud[: n - at]
    return out


STEADY = {"pink": pink, "hvac": hvac}
KINDS = ("pink", "hvac", "babble", "tv", "dishes")
FROM_A_PLACE = {"babble", "tv", "dishes"}  # a source in the room; the steady ones are diffuse


def make(kind: str, n: int, seed: int, talk: Talk) -> np.ndarray:
    """n samples of `kind`, at unit power."""
    rng = np.random.default_rng(seed)
    if kind in STEADY:
        return _unit(STEADY[kind](n, rng))
    if kind == "babble":
        return _unit(babble(n, rng, talk))
    if kind == "tv":
        return _unit(tv(n, rng, talk))
    if kind == "dishes":
        return _unit(dishes(n, rng))
    raise ValueError(f"unknown noise {kind!r} (known: {', '.join(KINDS)})")
