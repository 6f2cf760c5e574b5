"""First in the pool forkserver's preload list (:mod:`gpugeek_jupyter.pools.worker_origin`): the
notebook's interrupt signals the kernel's whole process group, the forkserver and the workers it
forked included. Ignored from here on: while the server imports distributed and torch (seconds), a
SIGINT would end it with a KeyboardInterrupt traceback printed into the cell; and every worker it
forks starts with it ignored, so one still starting when a launch is interrupted (before the
worker's own preload, :mod:`gpugeek_jupyter.pools.worker_preload`, ignores it too) does not die
with a traceback in the Jupyter server's log. Jobs are stopped by their runner, never by SIGINT."""

import signal
import threading

if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
