"""The progress bar of a run: one line on a stream, redrawn after each round.

It draws nothing during a run's first second (a short run prints only its summary) and ends its line
when the last round completes, so whatever is printed next starts on a line of its own.
"""

from __future__ import annotations

import time
from typing import TextIO

_DRAW_AFTER_S = 1.0
_BAR_WIDTH = 30


class ProgressBar:
    """Called as ``bar(completed_rounds, total_rounds)``; draws ``[####....] 12/100 rounds  3.4s``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.drawn = False

    def __call__(self, completed: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        if elapsed < _DRAW_AFTER_S and not self.drawn:
            return
        filled = int(_BAR_WIDTH * completed / max(total, 1))
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self.stream.write(f"\r[{bar}] {completed:,}/{total:,} rounds  {elapsed:6.1f}s")
        self.drawn = True
        if completed >= total:
            self.stream.write("\n")
        self.stream.flush()

    def break_line(self) -> None:
        """End a drawn, unfinished bar's line (before an error or interruption message)."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


__all__ = ["ProgressBar"]
