"""Doctor magic: ``%gpugeek_doctor``, the checks of ``gpugeek-jupyter doctor`` from a notebook."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class

from .. import doctor


@magics_class
class DoctorMagics(Magics):
    @line_magic
    def gpugeek_doctor(self, line: str) -> None:
        """Example::

            In [1]: %gpugeek_doctor
            gpugeek-jupyter 0.1.0, Python 3.11.7 at /work/main/.venv
            pass  labextension           gpugeek-jupyter 0.1.0 installed and enabled in JupyterLab 4.6.6 (...)
            pass  server extension       gpugeek_jupyter 0.1.0 enabled (/work/main/.venv/etc/jupyter)
            pass  registry               /root/.local/share/jupyter/runtime/gpugeek.sqlite is writable (schema version 3)
            skip  GPUs                   no NVIDIA GPU here (NVML library not found ...); local pools run with --gpu-type cpu, ...
            skip  dask-cuda              no GPU here: local pools need dask-cuda only on GPUs
            skip  kubernetes             the default backend is 'local', not 'kubernetes' (to check it: ...)
            pass  torch                  torch 2.13.0+cpu, a CPU build, as suits this machine (no NVIDIA GPU)
            7 checks: 4 passed, 3 skipped, 0 failed

        Checks what this kernel's Python sees: the JupyterLab extension and the server extension, the
        registry file, NVML and the GPUs (dask-cuda when there are some), Kubernetes when it is the
        default backend, and whether the torch build suits the GPUs. One line per check: ``pass``,
        ``fail`` (then ``fix:`` and what to do) or ``skip`` (does not apply here). A failed check is
        printed, not raised. ``gpugeek-jupyter doctor`` in a terminal runs the same checks and exits
        with status 1 when one fails.
        """
        if line.strip():
            raise UsageError(f"%gpugeek_doctor takes no options, got {line.strip()!r} (e.g. %gpugeek_doctor)")
        print(doctor.report(doctor.run_checks()), flush=True)
