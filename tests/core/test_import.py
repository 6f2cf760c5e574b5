"""``import gpugeek_jupyter`` (what %load_ext pays) stays light."""

from __future__ import annotations

import subprocess
import sys


def test_import_does_not_import_torch_dask_or_ipywidgets() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import gpugeek_jupyter; dt = time.perf_counter() - t; "
        "print([m for m in ('torch', 'dask', 'distributed', 'ipywidgets', 'bokeh', 'pandas') if m in sys.modules]); "
        "print(dt)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"


def test_load_ext_registers_magics_without_importing_torch() -> None:
    code = (
        "import sys; from IPython.testing.globalipapp import start_ipython; ip = start_ipython(); "
        "ip.run_line_magic('load_ext', 'gpugeek_jupyter'); "
        "print(sorted(m for m in ip.magics_manager.magics['line'] if m.startswith('gpugeek'))); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert "gpugeek_launch" in out[0] and "gpugeek_stop" in out[0]
    assert out[1] == "False"
