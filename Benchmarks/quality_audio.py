#!/usr/bin/env python3
"""How well a played-out recording kept a looped speech source (issue 53's audio measures).

    quality_audio.py SOURCE.wav RECEIVED.wav [--skip S] [--seconds N] [--chunk S]

SOURCE is what the publisher sent, looped (48 kHz mono); RECEIVED is what a receiver played out
(any rate the WAV says, mono or stereo: channels are averaged), from `rtc-cli join --playout-wav` or
`livekit_peer.py bot --audio-wav`. Both are taken to 16 kHz. The received audio is cut into chunks
(8 s); each is placed in the source by cross-correlation, then measured against that stretch:

- pesq: PESQ wideband (ITU-T P.862.2, PyPI `pesq`), the mean MOS-LQO of the chunks; a chunk that
  played nothing scores 1.0. PESQ aligns within a chunk itself, so playout-delay changes are fine.
- kept: of the 10 ms blocks where the source speaks (within 35 dB of its loudest block), the share
  whose played-out level is within 6 dB of the source's (each second re-aligned within 100 ms).
- silent: the share of those blocks played more than 20 dB under the source: a gap a listener hears.

Prints one JSON object. Nothing here is timed: the figures depend on the audio alone.
"""
import argparse
import json
import sys
import wave

import numpy as np

RATE = 16000


def read(path):
    with wave.open(path, "rb") as clip:
        rate, channels, width = clip.getframerate(), clip.getnchannels(), clip.getsampwidth()
        if width != 2:
            raise SystemExit(f"{path}: {8 * width}-bit samples; 16-bit PCM expected")
        data = np.frombuffer(clip.readframes(clip.getnframes()), dtype=np.int16).astype(np.float64)
    if channels > 1:
        data = data[: len(data) // channels * channels].reshape(-1, channels).mean(axis=1)
    return to_16k(data, rate)


def to_16k(data, rate):
    """Resamples to 16 kHz: a windowed-sinc low-pass at 7.2 kHz, then linear interpolation."""
    if rate == RATE:
        return data
    if rate > RATE:
        taps = np.arange(-64, 65)
        cutoff = 7200 / rate
        kernel = 2 * cutoff * np.sinc(2 * cutoff * taps) * np.hamming(len(taps))
        data = np.convolve(data, kernel / kernel.sum(), mode="same")
    positions = np.arange(0, len(data) - 1, rate / RATE)
    return np.interp(positions, np.arange(len(data)), data)


def best_offset(piece, looped, period):
    """The offset into one period of the looped source where `piece` fits best, and how well (0..1)."""
    span = looped[: period + len(piece)]
    size = 1 << int(np.ceil(np.log2(len(span) + len(piece))))
    correlation = np.fft.irfft(np.fft.rfft(span, size) * np.conj(np.fft.rfft(piece, size)), size)[:period]
    energy = np.convolve(span ** 2, np.ones(len(piece)), mode="valid")[:period]
    norm = np.sqrt(np.maximum(energy, 1e-9) * max(float(np.sum(piece ** 2)), 1e-9))
    score = correlation / norm
    offset = int(np.argmax(score))
    return offset, float(score[offset])


def block_levels(signal, block=160):
    usable = len(signal) // block * block
    return (signal[:usable].reshape(-1, block) ** 2).mean(axis=1)


def measure(source, received, chunk_seconds):
    period = len(source)
    looped = np.tile(source, int(np.ceil((len(received) + 2 * period) / period)) + 1)
    try:
        from pesq import pesq as pesq_score
    except ImportError:
        pesq_score = None
    chunk = int(chunk_seconds * RATE)
    scores, kept, silent, active = [], 0, 0, 0
    loudest = float(block_levels(source).max())
    for start in range(0, len(received) - chunk + 1, chunk):
        piece = received[start:start + chunk]
        offset, _ = best_offset(piece, looped, period)
        if pesq_score is not None:
            reference = looped[offset:offset + chunk]
            try:
                scores.append(float(pesq_score(RATE, reference, piece, "wb")))
            except Exception:  # noqa: BLE001 (pesq's NoUtterancesError: nothing played)
                scores.append(1.0)
        # Per second, re-aligned within 100 ms of the chunk's offset.
        for second in range(0, chunk - RATE + 1, RATE):
            part = piece[second:second + RATE]
            base = offset + second
            window = looped[max(0, base - 1600):base + RATE + 1600]
            fine, _ = best_offset(part, np.concatenate([window, window]), len(window) - RATE)
            reference = window[fine:fine + RATE]
            heard, said = block_levels(part), block_levels(reference)
            speaking = said > loudest * 10 ** -3.5
            active += int(speaking.sum())
            kept += int((speaking & (heard >= said / 4)).sum())
            silent += int((speaking & (heard < said / 100)).sum())
    return {
        "pesq": round(float(np.mean(scores)), 2) if scores else None,
        "pesqChunks": [round(s, 2) for s in scores],
        "kept": round(kept / active, 4) if active else 0.0,
        "silent": round(silent / active, 4) if active else 1.0,
        "blocks": active,
        "seconds": round(len(received) / RATE, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source")
    parser.add_argument("received")
    parser.add_argument("--skip", type=float, default=2, help="seconds of the received file to leave out at its start")
    parser.add_argument("--seconds", type=float, default=0, help="seconds to measure after that (0: the rest)")
    parser.add_argument("--chunk", type=float, default=8, help="seconds per PESQ chunk")
    args = parser.parse_args()
    source, received = read(args.source), read(args.received)
    received = received[int(args.skip * RATE):]
    if args.seconds > 0:
        received = received[: int(args.seconds * RATE)]
    if len(received) < args.chunk * RATE:
        print(json.dumps({"error": f"{args.received}: {len(received) / RATE:.1f} s to measure, under one {args.chunk} s chunk"}))
        return 1
    print(json.dumps(measure(source, received, args.chunk)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
