"""First in the pool forkserver's preload list (:mod:`gpugeek_jupyter.pools.worker_origin`): the
notebook's interrupt signals the kernel's whole process group, the forkserver included, and while
it imports distributed and torch (seconds) a SIGINT would end it with a KeyboardInterrupt traceback
printed into the cell. Ignored from here until :mod:`._preload_interrupts_restored`, last in the
list (multiprocessing's forkserver ignores SIGINT itself from then on, and its children start with
what was in force before)."""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
