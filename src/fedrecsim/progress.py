"""The progress bar of a run: one line on a stream, redrawn after each round.

It draws nothing during a run's first second (a short run prints only its summary), then at most ten
times a second, and always the last round, which ends its line so whatever is printed next starts on a
line of its own.
"""

from __future__ import annotations

import time
from typing import TextIO

_DRAW_AFTER_S = 1.0
_REDRAW_EVERY_S = 0.1
_BAR_WIDTH = 30


class ProgressBar:
    """Called as ``bar(completed_rounds, total_rounds)``; draws ``[####....] 12/100 rounds  3.4s``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.drawn = False
        self.last_drawn_s = -_REDRAW_EVERY_S

    def __call__(self, completed: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        due = elapsed >= _DRAW_AFTER_S and elapsed - self.last_drawn_s >= _REDRAW_EVERY_S
        if not due and not (completed >= total and self.drawn):
            return
        self.last_drawn_s = elapsed
        filled = int(_BAR_WIDTH * completed / max(total, 1))
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        # Marked drawn first: a Ctrl-C landing in the write must still get its line ended by break_line.
        self.drawn = True
        self.stream.write(f"\r[{bar}] {completed:,}/{total:,} rounds  {elapsed:6.1f}s")
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
