"""Generated bad option lines: only one-line UsageErrors, never a traceback or a pool."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from gpugeek_jupyter.store import get_registry

GOOD_VALUES = {
    "--gpu-type": st.sampled_from(["cpu", "T4", "a100-80gb", "H100-80GB"]),
    "--count": st.integers(1, 16).map(str),
    "--interconnect": st.sampled_from(["PCIe", "NVLink", "InfiniBand"]),
    "--framework": st.sampled_from(["PyTorch 2.0", "PyTorch 2.13"]),
    "--backend": st.sampled_from(["local", "kubernetes", "address"]),
    "--spot-fraction": st.floats(0, 1).map(lambda f: f"{f:.3f}"),
    "--budget": st.integers(0, 1000).map(str),
    "--idle-timeout": st.integers(0, 120).map(str),
    "--name": st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True),
    "--price": st.floats(0, 50).map(lambda f: f"{f:.2f}"),
    "--namespace": st.sampled_from(["team-risk", "default"]),
}
BAD_VALUES = {
    "--gpu-type": st.sampled_from(["V100", "", "a100", "GPU", "💥", "--count"]),
    "--count": st.one_of(
        st.integers(-10, 0).map(str),
        st.integers(1025, 10**9).map(str),
        st.sampled_from(["two", "1.5", "", "4x", "nan", "1e3"]),
    ),
    "--spot-fraction": st.one_of(
        st.floats(1.0001, 1e6).map(str),
        st.floats(-1e6, -0.0001).map(str),
        st.sampled_from(["nan", "inf", "most", "70%"]),
    ),
    "--budget": st.one_of(st.floats(-1e6, -0.01).map(lambda f: f"{f:.2f}"), st.sampled_from(["lots", "nan", "$5"])),
    "--idle-timeout": st.sampled_from(["-1", "soon", "inf", "1h"]),
    "--name": st.one_of(
        st.sampled_from(["My Pool", "-x", "x-", "UPPER", "a" * 64, "a_b", "a.b"]),
        st.text(min_size=1, max_size=8).filter(lambda s: not s.isalnum()),
    ),
    "--price": st.sampled_from(["-2", "free", "nan"]),
    "--pricing": st.sampled_from(["free", "spot", "cheap"]),
    "--interconnect": st.sampled_from(["carrier-pigeon", "USB", "NVSwitch9"]),
    "--backend": st.sampled_from(["pbs", "ray", "LOCALHOST"]),
    "--unknown-flag": st.sampled_from(["1", "x"]),
}


@st.composite
def bad_launch_lines(draw: st.DrawFn) -> str:
    bad_option = draw(st.sampled_from(sorted(BAD_VALUES)))
    others = draw(st.lists(st.sampled_from(sorted(set(GOOD_VALUES) - {bad_option})), unique=True, max_size=5))
    options = {name: draw(GOOD_VALUES[name]) for name in others}
    if options.get("--backend") == "address" or bad_option == "--interconnect":
        options.pop("--backend", None)  # keep the line's only mistake the one we planted
    if options.get("--backend") != "kubernetes":
        options.pop("--namespace", None)  # a Kubernetes field, refused for the other backends
    options[bad_option] = draw(BAD_VALUES[bad_option])
    order = draw(st.permutations(list(options)))
    return " ".join(f"{name} {shlex.quote(options[name])}" for name in order)


def gives_one_line_usage_error(call: Callable[[], object], scenario) -> bool:  # type: ignore[no-untyped-def]
    """True when ``call()`` raises a UsageError with a one-line message; any other exception is
    recorded as a failed run and raised."""
    try:
        call()
    except UsageError as e:
        message = str(e)
        return bool(message) and "\n" not in message
    except BaseException:
        scenario.record(survived=False)
        raise
    return False


@pytest.fixture(scope="module")
def shell() -> Iterator[object]:
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()  # the process-wide shell, whichever test made it first
    ip.run_line_magic("load_ext", "gpugeek_jupyter")
    yield ip


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=bad_launch_lines())
def test_generated_bad_launch_lines_give_only_usage_errors(shell, scenario, line: str) -> None:  # type: ignore[no-untyped-def]
    """Bad input: generated %gpugeek_launch option lines"""
    ok = gives_one_line_usage_error(lambda: shell.run_line_magic("gpugeek_launch", line), scenario)
    created = get_registry().list_pools()
    scenario.record(survived=ok and not created)
    assert ok, f"{line!r} did not give a one-line UsageError"
    assert created == [], f"{line!r} created a pool"


RUN_GOOD_VALUES = {
    "--timeout": st.integers(1, 3600).map(str),
    "--max-restarts": st.integers(0, 5).map(str),
    "--amp": st.sampled_from(["bf16", "fp16"]),
    "-o": st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
    "--rank0": st.just(None),
    "--no-stream": st.just(None),
}
RUN_BAD_VALUES = {
    "--pool": st.one_of(
        st.sampled_from(["ghost", "My Pool", "-", "fuzz2"]), st.from_regex(r"nope-[a-z]{1,6}", fullmatch=True)
    ),
    "--timeout": st.one_of(st.integers(-100, 0).map(str), st.sampled_from(["soon", "nan", "1h", "", "10s", "-inf"])),
    "--max-restarts": st.one_of(st.integers(-9, -1).map(str), st.sampled_from(["1.5", "many", "", "2x", "nan"])),
    "--amp": st.sampled_from(["fp8", "bf32", "float16", "", "yes", "BF-16"]),
    "-o": st.one_of(
        st.sampled_from(["1x", "a-b", "my var", "", "x.y", "for"]), st.from_regex(r"[0-9][a-z]{0,4}", fullmatch=True)
    ),
    "--script": st.sampled_from(["train.py", "missing.py"]),  # only for the line magic, never with a cell
    "--unknown-flag": st.sampled_from(["1", "x"]),
    "--nproc_per_node": st.sampled_from(["2", "8"]),
    "positional": st.sampled_from(["extra", "a b", "-- x"]),
}


@st.composite
def bad_run_lines(draw: st.DrawFn) -> str:
    bad_option = draw(st.sampled_from(sorted(RUN_BAD_VALUES)))
    others = draw(st.lists(st.sampled_from(sorted(set(RUN_GOOD_VALUES) - {bad_option})), unique=True, max_size=4))
    options = {name: draw(RUN_GOOD_VALUES[name]) for name in others}
    options[bad_option] = draw(RUN_BAD_VALUES[bad_option])
    parts = []
    for name in draw(st.permutations(list(options))):
        value = options[name]
        if name == "positional":
            parts.append(str(value))
        elif value is None:
            parts.append(name)
        else:
            parts.append(f"{name} {shlex.quote(value)}")
    return " ".join(parts)


@pytest.fixture
def shell_with_pool(shell):  # type: ignore[no-untyped-def]
    """The shell with a real current pool, so that option values, not a missing pool, are what fails."""
    shell.run_line_magic("gpugeek_launch", "--gpu-type cpu --count 2 --name fuzz")
    yield shell
    shell.run_line_magic("gpugeek_stop", "fuzz")


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=bad_run_lines())
def test_generated_bad_run_lines_give_only_usage_errors_and_run_nothing(shell_with_pool, scenario, line: str) -> None:  # type: ignore[no-untyped-def]
    """Bad input: generated %%gpugeek_run option lines"""
    cell = "print('this cell must not run', rank)\nrank"
    ok = gives_one_line_usage_error(lambda: shell_with_pool.run_cell_magic("gpugeek_run", line, cell), scenario)
    registry = get_registry()
    jobs, pools = registry.list_jobs(), [p.name for p in registry.list_pools()]
    scenario.record(survived=ok and not jobs and pools == ["fuzz"])
    assert ok, f"{line!r} did not give a one-line UsageError"
    assert jobs == [], f"{line!r} ran a job"
    assert pools == ["fuzz"], f"{line!r} changed the pools: {pools}"
