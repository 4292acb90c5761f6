"""The progress bar of a run: one line on a stream, redrawn after each round and within a round.

It draws nothing during a run's first second (a short run prints only its summary), then at most ten
times a second, and always the last round, which ends its line so whatever is printed next starts on a
line of its own. Within a round -- a long set-up, or a round of many thousand users -- the runner ticks
it (`fedrecsim.runner.RoundStatus`) and the line names the round under way and the virtual time, so a
long round shows that it moves; ticking only reads the run, so transcripts and results are unchanged.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

_DRAW_AFTER_S = 1.0
_REDRAW_EVERY_S = 0.1
_BAR_WIDTH = 30


class ProgressBar:
    """Called as ``bar(completed_rounds, total_rounds)``; draws ``[####....] 12/100 rounds  3.4s``, and
    ticked within a round (``bar.tick(status)``) ``[####....] 12/100 rounds, round 13 at 842.0 s virtual  3.4s``."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.started = time.perf_counter()
        self.drawn = False
        self.last_drawn_s = -_REDRAW_EVERY_S
        self.width = 0

    def __call__(self, completed: int, total: int) -> None:
        elapsed = time.perf_counter() - self.started
        if not self._due(elapsed) and not (completed >= total and self.drawn):
            return
        self._draw(completed, total, "", elapsed)

    def tick(self, status: Any) -> None:
        """Within a round: the round under way (0: the set-up) and the run's virtual time so far."""
        elapsed = time.perf_counter() - self.started
        if not self._due(elapsed) or status.completed >= status.total:
            return
        under_way = "set-up" if status.round == 0 else f"round {status.round:,}"
        self._draw(status.completed, status.total, f", {under_way} at {status.virtual_s:,.1f} s virtual", elapsed)

    def _due(self, elapsed: float) -> bool:
        return elapsed >= _DRAW_AFTER_S and elapsed - self.last_drawn_s >= _REDRAW_EVERY_S

    def _draw(self, completed: int, total: int, detail: str, elapsed: float) -> None:
        self.last_drawn_s = elapsed
        filled = int(_BAR_WIDTH * completed / max(total, 1))
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        head, tail = f"[{bar}] {completed:,}/{total:,} rounds{detail}", f"  {elapsed:6.1f}s"
        # A line shorter than the last one is padded to its width (no terminal escapes needed), before the
        # elapsed time, which always ends the line.
        padding = " " * max(0, self.width - len(head) - len(tail))
        self.width = len(head) + len(padding) + len(tail)
        # Marked drawn first: a Ctrl-C landing in the write must still get its line ended by break_line.
        self.drawn = True
        self.stream.write(f"\r{head}{padding}{tail}")
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
