"""``%gpugeek_doctor`` in a real IPython kernel started with jupyter_client, as a notebook user meets it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.kernel import KernelSession, magics_kernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    registry = tmp_path_factory.mktemp("doctor-registry") / "gpugeek.sqlite"
    with magics_kernel({"GPUGEEK_REGISTRY": str(registry)}) as session:
        yield session


def test_doctor_prints_one_line_per_check_and_the_jupyter_checks_pass(kernel: KernelSession) -> None:
    result = kernel.run("%gpugeek_doctor")
    assert result.error is None, result.text
    lines = result.stdout.strip().split("\n")
    assert lines[0].startswith("gpugeek-jupyter "), result.text
    assert lines[1].startswith("pass  labextension "), lines[1]
    assert lines[2].startswith("pass  server extension "), lines[2]
    assert lines[3].startswith("pass  registry "), lines[3]
    assert all(line[:6] in ("pass  ", "fail  ", "skip  ") for line in lines[1:-1])
    assert lines[-1].startswith(f"{len(lines) - 2} checks: ")


def test_help_starts_with_an_example_that_runs(kernel: KernelSession) -> None:
    shown = kernel.run("print(get_ipython().object_inspect_text('%gpugeek_doctor'))")  # what ? shows
    assert shown.error is None, shown.text
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout)  # the help's colours
    docstring = plain.split("Docstring:", 1)[1].lstrip()
    assert docstring.startswith("Example::\n\n    In [1]: %gpugeek_doctor\n"), docstring[:200]
    example = docstring.split("In [1]: ", 1)[1].split("\n", 1)[0]
    ran = kernel.run(example)
    assert ran.error is None and ran.stderr == "", ran.text
    assert " checks: " in ran.stdout.strip().split("\n")[-1]


def test_options_are_refused_with_a_one_line_usage_error(kernel: KernelSession) -> None:
    result = kernel.run("%gpugeek_doctor --verbose")
    assert result.error is None, result.text
    assert (
        result.stderr.strip() == "UsageError: %gpugeek_doctor takes no options, got '--verbose' (e.g. %gpugeek_doctor)"
    )


def test_failed_checks_are_printed_with_their_fix_not_raised_even_when_the_extension_cannot_load(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    session = KernelSession(
        env={
            "GPUGEEK_REGISTRY": str(blocker / "gpugeek.sqlite"),
            "GPUGEEK_BACKEND": "kubernetes",
            "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
            "KUBERNETES_SERVICE_HOST": "",
        }
    )
    try:
        session.run("%load_ext gpugeek_jupyter")  # may fail on the registry; the doctor is there to say why
        result = session.run("%gpugeek_doctor")
        assert result.error is None, result.text
        lines = result.stdout.strip().split("\n")
        [registry] = [x for x in lines if x.startswith("fail  registry ")]
        assert f"{blocker} is a file, not a folder; fix: export GPUGEEK_REGISTRY=" in registry
        [credentials] = [x for x in lines if x.startswith("fail  kubernetes credentials ")]
        assert f"KUBECONFIG={tmp_path / 'no-kubeconfig'} names no existing file" in credentials
        assert lines[-1].endswith(" 2 failed"), lines[-1]
    finally:
        session.shutdown()
