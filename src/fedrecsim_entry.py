"""The ``fedrecsim`` console command's entry point, outside the ``fedrecsim`` package on purpose.

Importing ``fedrecsim`` takes most of a second (numpy, scipy, trio, every protocol); a Ctrl-C in that
time arrives before any of the package's code could handle it. This module imports nothing heavy, so
its handlers are in place first, and they hold for the whole command:

- Ctrl-C (SIGINT) at any point -- during the imports too -- ends with one line and exit 130;
- a closed standard output (``fedrecsim protocols | head -1``) ends quietly with exit 141 (128 + SIGPIPE),
  standard output pointed at ``/dev/null`` so that the interpreter's last flush cannot fail again (the
  recipe of the Python documentation, "Note on SIGPIPE").

Everything else is `fedrecsim.cli.main`'s. ``python -m fedrecsim.cli`` and the study scripts'
`fedrecsim.study.run_script` end a closed standard output the same way, with `pipe_safe` (kept here,
where importing it costs nothing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

_EXIT_SIGINT = 130
_EXIT_SIGPIPE = 141


def main() -> int:
    """Run the ``fedrecsim`` command with the process's arguments; returns its exit code."""
    try:
        from fedrecsim.cli import main as command

        return pipe_safe(command)
    except KeyboardInterrupt:
        _quiet_stdout()
        _say("fedrecsim: interrupted")
        return _EXIT_SIGINT


def pipe_safe(command: Callable[[], int]) -> int:
    """``command()``'s exit status with its output flushed; or, when the reader closed standard output
    (``| head -1``), 141 (128 + SIGPIPE, what a shell reports for a command SIGPIPE ended) with standard
    output pointed at /dev/null, so that nothing printed or flushed on the way out fails again."""
    try:
        code = command()
        sys.stdout.flush()  # a closed pipe fails here, inside the handler, not in the interpreter's exit
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return _EXIT_SIGPIPE


def _quiet_stdout() -> None:
    """Point standard output at /dev/null: what is still buffered, or printed on the way out, goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:  # stderr is a closed pipe too: the exit code says it
        pass


if __name__ == "__main__":
    sys.exit(main())
