"""Rooms: image-source impulse responses (pyroomacoustics) from a talker to a satellite's
microphone, at a stated size, reverberation time (RT60) and distance."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pyroomacoustics as pra  # type: ignore[import-untyped]
from scipy.signal import fftconvolve  # type: ignore[import-untyped]

RATE = 16000
MIC_HEIGHT_M = 1.0  # a satellite on a counter or a shelf
TALKER_HEIGHT_M = 1.6


@dataclass(frozen=True)
class Room:
    """A shoebox room, its reverberation, and how far the talker stands from the microphone."""

    name: str
    size_m: tuple[float, float, float]
    rt60_s: float
    distance_m: float

    def describe(self) -> str:
        x, y, z = self.size_m
        return f"{x:g} x {y:g} x {z:g} m, RT60 {self.rt60_s:g} s, talker {self.distance_m:g} m away"


# Living-room and kitchen sizes, RT60 0.2-0.8 s, the talker 0.5-4 m away.
ROOMS = {
    "near": Room("near", (4.0, 3.5, 2.5), 0.2, 0.5),  # a furnished bedroom, at arm's length
    "kitchen": Room("kitchen", (4.0, 3.0, 2.5), 0.5, 1.5),  # hard surfaces
    "living": Room("living", (6.0, 5.0, 2.6), 0.4, 2.5),
    "hall": Room("hall", (8.0, 6.0, 2.8), 0.8, 4.0),  # open plan, bare floors, across the room
}


def _positions(room: Room) -> tuple[list[float], list[float]]:
    """The microphone 0.5 m from one wall, centred; the talker `distance_m` away across the
    room (its horizontal reach), at standing head height."""
    x, y, _ = room.size_m
    mic = [0.5, y / 2, MIC_HEIGHT_M]
    drop = TALKER_HEIGHT_M - MIC_HEIGHT_M
    reach = float(np.sqrt(max(room.distance_m**2 - drop**2, 0.01)))
    if 0.5 + reach > x - 0.3:
        raise ValueError(f"{room.name}: a {room.distance_m} m distance does not fit its length")
    return mic, [0.5 + reach, y / 2 + 0.2, TALKER_HEIGHT_M]


def _simulate(room: Room, source: str, rt60_s: float) -> np.ndarray:
    e_absorption, max_order = pra.inverse_sabine(rt60_s, list(room.size_m))
    shoebox = pra.ShoeBox(
        list(room.size_m), fs=RATE, materials=pra.Material(e_absorption), max_order=max_order
    )
    mic, talker = _positions(room)
    x, y, _ = room.size_m
    shoebox.add_source(talker if source == "talker" else [x - 0.6, y - 0.6, 1.2])
    shoebox.add_microphone(mic)
    shoebox.compute_rir()
    rir = np.asarray(shoebox.rir[0][0], dtype=np.float64)
    return np.asarray(rir / np.max(np.abs(rir)))


def measured_rt60(rir: np.ndarray) -> float:
    """The response's own RT60 (Schroeder's backward integration)."""
    return float(pra.experimental.measure_rt60(rir, fs=RATE))


@cache
def impulse_response(room: Room, source: str = "talker") -> np.ndarray:
    """The room's impulse response to the microphone, normalised to a direct path of 1, with
    its measured RT60 within 10 % of the room's. source: "talker", or "noise" (a point near the
    far corner, for a TV or dishes). Sabine's formula overshoots in a shoebox with image
    sources (a 0.8 s request measured 1.4 s), so the request is corrected a few times."""
    asked = room.rt60_s
    for _ in range(6):
        rir = _simulate(room, source, asked)
        measured = measured_rt60(rir)
        if abs(measured - room.rt60_s) <= 0.1 * room.rt60_s:
            break
        asked *= room.rt60_s / measured
    return rir


def direct_delay_samples(rir: np.ndarray) -> int:
    """Where the direct sound arrives: the response's first peak."""
    return int(np.argmax(np.abs(rir)))


def place(dry: np.ndarray, room: Room, source: str = "talker") -> np.ndarray:
    """`dry` as the microphone hears it in `room`, shifted so the direct sound lines up with the
    dry signal (a word ends where it ended; its echo goes on after it)."""
    rir = impulse_response(room, source)
    wet = fftconvolve(dry, rir)[direct_delay_samples(rir) :]
    return np.asarray(wet[: len(dry)], dtype=np.float64)
