"""The notebook's interrupt signals the kernel's whole process group: a SIGINT that reaches the pool
forkserver while it imports distributed and torch must not end it with a traceback in the cell."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import multiprocessing, multiprocessing.forkserver as fs, os, signal, threading, time
    from gpugeek_jupyter.pools.worker_origin import forkserver_preload
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(forkserver_preload(True))
    stop = threading.Event()

    def interrupt():  # as a notebook's interrupt does, again and again while the server imports
        while not fs._forkserver._forkserver_pid:
            time.sleep(0.01)
        time.sleep(0.3)  # past the interpreter's own start (its first tenth of a second is not covered)
        while not stop.is_set():
            os.kill(fs._forkserver._forkserver_pid, signal.SIGINT)
            time.sleep(0.05)

    threading.Thread(target=interrupt, daemon=True).start()
    probe = context.Process(target=int)
    probe.start()
    probe.join(120)
    stop.set()
    print("probe exit", probe.exitcode)
    """
)


def test_an_interrupt_during_the_forkservers_imports_is_ignored_and_prints_nothing() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "probe exit 0" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert "KeyboardInterrupt" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]


CHILD = textwrap.dedent(
    """
    import multiprocessing, signal
    from gpugeek_jupyter.pools.worker_origin import forkserver_preload
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(forkserver_preload(False))
    child = context.Process(target=signal.raise_signal, args=(signal.SIGINT,))  # a SIGINT the moment it starts
    child.start()
    child.join(120)
    print("child exit", child.exitcode)
    """
)


def test_a_worker_forked_from_the_server_starts_with_the_interrupt_ignored() -> None:
    """A worker still starting when a launch is interrupted (before its own preload) is not killed
    by the notebook's SIGINT and prints no traceback."""
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "child exit 0" in done.stdout, (done.stdout, done.stderr[-3000:])
    assert "KeyboardInterrupt" not in done.stderr, done.stderr[-3000:]
