"""Last in the pool forkserver's preload list: SIGINT as it was before
:mod:`._preload_interrupts_ignored` (Python's own handler), for the forkserver's other children."""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.default_int_handler)
