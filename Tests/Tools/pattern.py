#!/usr/bin/env python3
"""The still test pattern the interop tests publish and measure against (a function of relative
coordinates, so a scaled copy is compared with the pattern made at its own size).

  pattern.py y4m PATH [--size 1280x720] [--fps 15] [--seconds 2]   write it as a Y4M clip
  pattern.py psnr FILE [--last 30]                                  PSNR (luma) of the last frames of a recording
                                                                    (IVF or WebM, decoded by ffmpeg); one JSON line
"""
import argparse
import json
import math
import subprocess
import sys

import numpy as np


def pattern_planes(width, height):
    """I420 planes: a horizontal luma ramp with an 8x6 checker on top, and chroma ramps."""
    x = np.arange(width, dtype=np.float64)[None, :] / width
    y = np.arange(height, dtype=np.float64)[:, None] / height
    checker = ((np.floor(x * 8) + np.floor(y * 6)) % 2)
    luma = (40 + 150 * x + 50 * checker).astype(np.uint8)
    cw, ch = (width + 1) // 2, (height + 1) // 2
    cx = np.arange(cw, dtype=np.float64)[None, :] / cw
    cy = np.arange(ch, dtype=np.float64)[:, None] / ch
    u = np.broadcast_to((64 + 128 * cx), (ch, cw)).astype(np.uint8)
    v = np.broadcast_to((64 + 128 * cy), (ch, cw)).astype(np.uint8)
    return luma, u, v


def pattern_i420(width, height):
    luma, u, v = pattern_planes(width, height)
    return luma.tobytes() + u.tobytes() + v.tobytes()


def write_y4m(path, width, height, fps, seconds):
    frame = pattern_i420(width, height)
    with open(path, "wb") as f:
        f.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for _ in range(max(1, int(fps * seconds))):
            f.write(b"FRAME\n")
            f.write(frame)


def psnr_luma(luma, width, height):
    """PSNR (dB) of a luma plane (numpy, height x width) against the pattern at that size."""
    expected, _, _ = pattern_planes(width, height)
    mse = np.mean((luma.astype(np.float64) - expected.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)


def recording_psnr(path, last):
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height",
                            "-of", "csv=p=0", path], capture_output=True, text=True, check=True)
    width, height = map(int, probe.stdout.strip().split(",")[:2])
    # Every frame once, as recorded: a file whose timing says no frame rate (libwebrtc's senders'
    # RTP clocks) would otherwise be filled out to a constant rate, gigabytes of repeated frames.
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "yuv420p",
                          "-s", f"{width}x{height}", "-"],
                         capture_output=True, check=True).stdout
    size = width * height * 3 // 2
    frames = len(raw) // size
    values = []
    for index in range(max(0, frames - last), frames):
        luma = np.frombuffer(raw[index * size: index * size + width * height], dtype=np.uint8).reshape(height, width)
        values.append(round(psnr_luma(luma, width, height), 2))
    return {"frames": frames, "width": width, "height": height, "psnr": values}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    y4m = sub.add_parser("y4m")
    y4m.add_argument("path")
    y4m.add_argument("--size", default="1280x720")
    y4m.add_argument("--fps", type=int, default=15)
    y4m.add_argument("--seconds", type=float, default=2)
    psnr = sub.add_parser("psnr")
    psnr.add_argument("path")
    psnr.add_argument("--last", type=int, default=30)
    args = parser.parse_args()
    if args.command == "y4m":
        width, height = map(int, args.size.split("x"))
        write_y4m(args.path, width, height, args.fps, args.seconds)
    else:
        print(json.dumps(recording_psnr(args.path, args.last)))


if __name__ == "__main__":
    sys.exit(main())
