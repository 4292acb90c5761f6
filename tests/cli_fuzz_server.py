"""A fork server for the command-line fuzz test (tests/test_cli_fuzz.py): it imports fedrecsim once, then runs
each command it is sent in a forked child under an address-space limit and a timeout.

Protocol, one JSON document a line: in ``{"argv": [...], "cwd": DIR}``; out ``{"rc": int, "stderr": str,
"stdout": str, "timed_out": bool}``. The child is the console entry point (`fedrecsim_entry.main`) with
``argv``; its output goes to files in ``cwd``. Run as ``python cli_fuzz_server.py LIMIT_BYTES TIMEOUT_S``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback

import fedrecsim.cli  # noqa: F401 -- imported once here, so that each forked command starts at once
import fedrecsim_entry


def _child(argv: list[str], cwd: str, limit: int) -> None:
    os.chdir(cwd)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        handle = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = ["fedrecsim", *argv]
    try:
        code = fedrecsim_entry.main()
    except SystemExit as stop:  # argparse's usage errors and --help, as the interpreter would end them
        code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
    except BaseException:  # what the interpreter would print and exit with: the test reports it
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    limit, timeout_s = int(sys.argv[1]), float(sys.argv[2])
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(request["argv"], request["cwd"], limit)
            finally:
                os._exit(70)  # only if the entry point itself raised: the parent reads the traceback
        deadline = time.monotonic() + timeout_s
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = 0
                break
            time.sleep(0.01)
        outputs = {}
        for name in ("stdout", "stderr"):
            path = os.path.join(request["cwd"], name)
            with open(path, encoding="utf-8", errors="replace") as handle:
                outputs[name] = handle.read()
        rc = os.waitstatus_to_exitcode(status) if not timed_out else -9
        print(json.dumps({"rc": rc, "timed_out": timed_out, **outputs}), flush=True)


if __name__ == "__main__":
    main()
