"""In a real kernel: a cell after which the main thread still holds Python's import lock (what an
interrupt that lands inside an import leaves, even when the cell goes on as if not interrupted) does
not leave the kernel's other threads waiting for ever at their next import."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.kernel import magics_kernel

pytestmark = pytest.mark.slow

PROBE = """
import importlib, threading
importer = threading.Thread(target=importlib.import_module, args=("fresh_after_interrupt",), daemon=True)
importer.start()
importer.join(10)
print("stuck" if importer.is_alive() else "imported")
"""


def test_the_import_lock_a_cell_left_held_is_given_back_before_the_next_cell(tmp_path: Path) -> None:
    (tmp_path / "fresh_after_interrupt.py").write_text("x = 1\n")
    with magics_kernel({"GPUGEEK_REGISTRY": str(tmp_path / "registry.sqlite")}) as kernel:
        setup = kernel.run(f"import _imp, sys\nsys.path.insert(0, {str(tmp_path)!r})")
        assert setup.error is None, setup.text
        held = kernel.run("_imp.acquire_lock()\n_imp.lock_held()")  # held now, as an interrupt leaves it
        assert held.displays == [{"text/plain": "True"}], held.text
        probe = kernel.run(PROBE, timeout=60)
        assert probe.stdout.strip() == "imported", probe.text
