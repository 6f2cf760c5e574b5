"""The forkserver's warm-up (started by ``%load_ext``, in a thread, while the user's cells run) imports
what the workers need and nothing the notebook would see: pandas imported there, between two cells,
finds no ``get_ipython()`` and takes the kernel for a terminal, so every DataFrame's text is cut to
the width of one (``id ... sha256``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import sys
    from multiprocessing import forkserver
    from gpugeek_jupyter.pools.worker_origin import forkserver_preload, warm_up
    warm_up(preload_torch=False).join(120)
    print("pandas imported:", "pandas" in sys.modules)
    print("preload is ours:", forkserver._forkserver._preload_modules == forkserver_preload(False))
    """
)


def test_the_warm_up_starts_the_forkserver_with_our_preload_without_importing_pandas() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pandas imported: False" in done.stdout, done.stdout
    assert "preload is ours: True" in done.stdout, done.stdout
