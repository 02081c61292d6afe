"""deltalog.processes.alive: running, exited but not yet reaped (a zombie), reaped."""
import os
import subprocess
import sys
import time

from deltalog.processes import alive


def test_a_child_is_alive_while_it_runs_and_not_once_it_exited_even_before_it_is_reaped():
    assert alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert alive(child.pid)
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while alive(child.pid) and time.monotonic() < deadline:  # killed, not waited on: a zombie meanwhile
        time.sleep(0.05)
    assert not alive(child.pid)
    child.wait()
    assert not alive(child.pid)
