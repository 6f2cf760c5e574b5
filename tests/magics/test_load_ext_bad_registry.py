"""``%load_ext`` with a registry that cannot be opened: one line per magic left out, no traceback,
and ``%gpugeek_doctor`` (registered first) there to say why."""

from __future__ import annotations

import pytest

from support.kernel import KernelSession

pytestmark = pytest.mark.slow


def test_a_registry_path_that_cannot_be_opened_leaves_the_doctor_and_names_the_cause() -> None:
    session = KernelSession(env={"GPUGEEK_REGISTRY": "/sys/gpugeek-nowhere/registry.sqlite"})
    try:
        loaded = session.run("%load_ext gpugeek_jupyter")
        assert loaded.error is None and "Traceback" not in loaded.text, loaded.text
        lines = loaded.stderr.splitlines()
        assert lines and all(line.startswith("gpugeek: ") and "run %gpugeek_doctor" in line for line in lines), lines
        assert any("PoolMagics could not start" in line and "/sys/gpugeek-nowhere" in line for line in lines), lines
        doctor = session.run("%gpugeek_doctor", timeout=120)
        assert doctor.error is None and "fail  registry" in doctor.stdout, doctor.text
    finally:
        session.shutdown()
