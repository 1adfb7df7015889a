"""Summaries of py-spy's raw output (collapsed stacks), for ``bench/peers.py --profile DIR``.

Each line of a raw file is ``frame;frame;...;leaf COUNT``, a frame being
``function (file:line)``. Functions are counted without their line: *own* samples are those
where the function is the leaf (running its own code), *total* those where it is anywhere on
the stack (once per sample), leaving out the frames every sample of a thread passes through
(thread start-up, the CLI, ``run_forever``).
Run alone: ``python bench/_peers_profile.py FILE... [--top N]``.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _function(frame: str) -> str:
    """``name (file:line)`` -> ``name (shortened file)``; other frames (threads) as they are."""
    found = _FRAME.match(frame.strip())
    if not found:
        return frame.strip()
    path = found["file"]
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{found['name']} ({path})"


_WRAPPERS = (
    "(threading.py)",
    "(click/",
    "(<frozen runpy>)",
    "(asyncio/runners.py)",
    "(cronbus/cli/",
    "(cronbus/__main__.py)",
    "BaseEventLoop.run_forever ",
    "BaseEventLoop.run_until_complete ",
    "run (cronbus/runner.py)",
)
"""Frames every sample of a thread passes through: left out of the *total* ranking."""


def _where(frames: list[str]) -> str:
    """Which thread a stack is from: the event loop's, the thread pool's, or another."""
    if any(f.startswith("_worker (concurrent/futures/thread.py") for f in frames):
        return "thread pool (sync bodies)"
    if any(f.startswith("BaseEventLoop.run_forever ") for f in frames):
        return "event loop thread"
    return "other threads"


def summarize(paths: list[Path]) -> tuple[int, Counter[str], Counter[str], Counter[str]]:
    """Samples in all, own and total samples per function, and samples per kind of thread."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    samples = 0
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_function(f) for f in stack.split(";") if f]
            frames = [f for f in frames if " (" in f]  # drop process and thread labels
            if not frames:
                continue
            samples += count
            own[frames[-1]] += count
            threads[_where(frames)] += count
            for name in set(frames):
                if not any(marker in name for marker in _WRAPPERS):
                    total[name] += count
    return samples, own, total, threads


def print_summary(paths: list[Path], top: int = 15) -> None:
    """Print the top functions by own and by total samples."""
    samples, own, total, threads = summarize(paths)
    print(f"\npy-spy: {samples} samples in {', '.join(p.name for p in paths)}")
    if not samples:
        return
    shares = ", ".join(f"{name} {100 * n / samples:.0f}%" for name, n in threads.most_common())
    print(f"by thread: {shares}")
    for title, counter in (("own", own), ("total", total)):
        print(f"top {top} by {title} time:")
        for name, count in counter.most_common(top):
            print(f"  {100 * count / samples:5.1f}%  {name}")


def summarize_folder(folder: Path, top: int = 15) -> None:
    """One summary per profiled measurement (the files of its workers together)."""
    groups: dict[str, list[Path]] = {}
    for path in sorted(folder.glob("*-worker*.txt")):
        groups.setdefault(path.name.rsplit("-worker", 1)[0], []).append(path)
    for paths in groups.values():
        print_summary(paths, top)


def main() -> None:
    """Summarize the files named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print_summary(args.files, args.top)


if __name__ == "__main__":
    main()
