"""Session-wide test settings: a test that outlives its time limit is named above its stack.

The limit and the method are pytest-timeout's ``timeout`` and ``timeout_method`` in pyproject.toml; a
test that legitimately takes longer is marked ``@pytest.mark.timeout(N)``.
"""

from __future__ import annotations

import threading

import pytest

_TIMER = pytest.StashKey[threading.Timer]()


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> bool | None:  # type: ignore[no-untyped-def]
    """pytest-timeout's thread method, plus the hung test's name: its own report prints only the stacks,
    and in a pytest-trio test none of them shows the test's file."""
    if settings.method != "thread":
        return None
    import pytest_timeout

    def expire() -> None:
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(item)
        item.config.get_terminal_writer().line(f"\n{item.nodeid} ran longer than its limit of {settings.timeout:g} s")
        pytest_timeout.timeout_timer(item, settings)

    timer = threading.Timer(settings.timeout, expire)
    timer.name = f"pytest-timeout {item.nodeid}"
    item.stash[_TIMER] = timer
    timer.start()
    return True


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    timer = item.stash.get(_TIMER, None)
    if timer is None:
        return None
    timer.cancel()
    timer.join()
    return True
