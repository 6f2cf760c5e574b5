"""A notebook's interrupt that lands inside Python's import machinery must not leave the global
import lock held: the main thread could go on, but every other thread's next import (the pool
forkserver's warm-up, dask's event loop, job watchers) would wait for ever, and a launch waiting on
one of them hung the kernel.

Each test runs in a fresh interpreter: SIGINTs are sent to it by a thread of its own while its main
thread imports hundreds of new modules and a second thread imports others."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

MODULES = 3000

# Prints "interrupts=N held_by_main=N other_thread_done=True|False". The main thread imports m0..mN
# under a SIGINT every 0.7 ms (each KeyboardInterrupt caught, as a cell's code would be interrupted)
# inside ``guard``; then SIGINT is ignored, and the main thread gives back what it still holds.
SCENARIO = """
import _imp, importlib, os, signal, sys, threading, time
from contextlib import nullcontext
sys.path.insert(0, {folder!r})
from gpugeek_jupyter.interrupts import interrupts_outside_imports
guard = interrupts_outside_imports() if {guarded!r} else nullcontext()

def other_thread():
    for i in range({modules}):
        importlib.import_module(f"b{{i}}")

def interrupter(stop):
    time.sleep(0.1)  # the main thread is in its loop by then
    while not stop.is_set():
        time.sleep(0.0007)
        os.kill(os.getpid(), signal.SIGINT)

interrupts = 0
stop = threading.Event()
with guard:
    importer = threading.Thread(target=other_thread, daemon=True)
    sender = threading.Thread(target=interrupter, args=(stop,), daemon=True)
    importer.start()
    sender.start()
    imported = 0
    while True:
        try:  # everything inside the try: an interrupt between two imports is caught too
            while imported < {modules}:
                importlib.import_module(f"m{{imported}}")
                imported += 1
            stop.set()
            sender.join()
            time.sleep(0.05)  # an interrupt delivered again after the last import lands here
            break
        except KeyboardInterrupt:
            interrupts += 1
signal.signal(signal.SIGINT, signal.SIG_IGN)
importer.join(5)
done_before = not importer.is_alive()
held = 0
while True:
    try:
        _imp.release_lock()
        held += 1
    except RuntimeError:
        break
print(f"interrupts={{interrupts}} held_by_main={{held}} other_thread_done={{done_before}}")
"""


def _run(tmp_path: Path, guarded: bool) -> dict[str, str]:
    folder = tmp_path / "modules"
    folder.mkdir(exist_ok=True)
    for i in range(MODULES):
        (folder / f"m{i}.py").write_text("x = 1\n")
        (folder / f"b{i}.py").write_text("x = 1\n")
    script = SCENARIO.format(folder=str(folder), guarded=guarded, modules=MODULES)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    fields = dict(part.split("=") for part in done.stdout.split())
    fields["stderr"] = done.stderr
    return fields


def test_without_the_guard_an_interrupted_import_leaves_the_lock_held_and_other_threads_stuck(
    tmp_path: Path,
) -> None:
    """The hazard itself, on this Python: the guard below is needed only while this holds."""
    found = _run(tmp_path, guarded=False)
    assert int(found["interrupts"]) > 50, found
    if found["held_by_main"] == "0":
        pytest.skip("this Python no longer leaves the import lock held after an interrupted import")
    assert found["other_thread_done"] == "False", found


def test_with_the_guard_interrupts_still_arrive_and_no_import_lock_is_left_held(tmp_path: Path) -> None:
    found = _run(tmp_path, guarded=True)
    assert int(found["interrupts"]) > 50, found  # interrupts are delayed a few ms, never dropped
    assert found["held_by_main"] == "0", found
    assert found["other_thread_done"] == "True", found
    assert "Exception ignored" not in found["stderr"], found["stderr"][-2000:]  # none swallowed


RELEASE = """
import _imp, importlib, sys, threading
sys.path.insert(0, {folder!r})
from gpugeek_jupyter.interrupts import release_import_lock_left_by_interrupt
_imp.acquire_lock()  # what an interrupt inside the import machinery leaves behind
_imp.acquire_lock()  # twice: the lock is re-entrant
other = threading.Thread(target=importlib.import_module, args=("fresh",), daemon=True)
other.start()
other.join(1)
stuck = other.is_alive()
released = release_import_lock_left_by_interrupt()
other.join(10)
print(stuck, released, other.is_alive(), release_import_lock_left_by_interrupt())
"""


def test_the_lock_an_interrupt_left_held_is_given_back_and_other_threads_import_again(tmp_path: Path) -> None:
    (tmp_path / "fresh.py").write_text("x = 1\n")
    done = subprocess.run(
        [sys.executable, "-c", RELEASE.format(folder=str(tmp_path))], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "2", "False", "0"], done.stdout
