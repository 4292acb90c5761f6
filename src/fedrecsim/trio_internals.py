"""The trio internals the delay line and the virtual clock use, imported and checked in one place.

`fedrecsim.clock` asks whether a task waits for the loop to be idle (``GLOBAL_RUN_CONTEXT.runner
.waiting_for_idle``); `fedrecsim.network.network` parks waiters with a `WaitTaskRescheduled` trap and
wakes them as ``GLOBAL_RUN_CONTEXT.runner.reschedule`` does, filling in the task's next send and appending
it to the loop's ``runq`` itself, unless the run is a guest run or an instrument is hooked on
``task_scheduled`` (docs/architecture.md, "Virtual time").
Internals carry no compatibility promise, so pyproject.toml bounds trio to the releases the suite has
passed on (`TESTED_TRIO`). Should a trio outside them be installed anyway and lack one of these, importing
fedrecsim raises a `SimulationError` naming the installed trio, what it lacks and the tested range,
instead of an ImportError from inside trio or an AttributeError in the middle of a run.
"""

from __future__ import annotations

import trio

from .errors import SimulationError

#: The trio releases the suite has passed on: pyproject.toml's requirement.
TESTED_TRIO = ">=0.25,<0.36"
#: The attributes of trio's run loop (``GLOBAL_RUN_CONTEXT.runner``) that fedrecsim reads during a run.
RUNNER_ATTRIBUTES = ("reschedule", "waiting_for_idle", "runq", "is_guest", "instruments")
#: The fields of trio's `Task` that the network's wake fills in, as the run loop's ``reschedule`` does.
TASK_ATTRIBUTES = ("coro", "_next_send_fn", "_next_send", "_abort_func", "custom_sleep_data")


def _missing(what: str) -> SimulationError:
    return SimulationError(
        f"trio {trio.__version__} lacks {what}, which fedrecsim's delay line and virtual clock use; "
        f"install a trio fedrecsim was tested with: pip install 'trio{TESTED_TRIO}'"
    )


try:
    from trio._core._run import GLOBAL_RUN_CONTEXT, Runner, Task
    from trio._core._traps import WaitTaskRescheduled
except ImportError as error:
    raise _missing(f"an internal: {error.msg}") from error
_LACKING = [name for name in RUNNER_ATTRIBUTES if not hasattr(Runner, name)]
if _LACKING:
    raise _missing(f"the run loop's {', '.join(_LACKING)}")
_LACKING = [name for name in TASK_ATTRIBUTES if not hasattr(Task, name)]
if _LACKING:
    raise _missing(f"the task's {', '.join(_LACKING)}")

__all__ = ["GLOBAL_RUN_CONTEXT", "RUNNER_ATTRIBUTES", "TASK_ATTRIBUTES", "TESTED_TRIO", "WaitTaskRescheduled"]
