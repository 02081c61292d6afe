"""Whether a local process is still running: for the processes this package starts and waits on (a
JVM writing its class archive, the local Spark server)."""
from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` runs; False once it has exited, a zombie its parent has not reaped yet included.
    A process of another user that exists counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # no /proc (macOS): kill's answer stands
        return True
