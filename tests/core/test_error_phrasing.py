"""One bad input, three surfaces: each error is phrased by the surface that received it.

The Python API names keyword arguments (``count=4``), a magic names flags (``--count 4``) and other
magics (``%gpugeek_stop dev``), the server names JSON fields (``"count": 4``). Every message is one
line, with the bad value written by ``repr()`` (JSON on the server).
"""

from __future__ import annotations

import json
import pickle
import shlex
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError

import gpugeek_jupyter
from gpugeek_jupyter.errors import (
    ConflictError,
    GpugeekError,
    PerSurface,
    Phrase,
    Setting,
    SpecError,
    Surface,
    Syntax,
)
from gpugeek_jupyter.jobs.job_env import JobEnvError, check_job_env, parse_assignments
from gpugeek_jupyter.server.launch_request import parse_launch_body
from gpugeek_jupyter.spec import PoolSpec

NO_SUCH_GPUS = {"gpu_type": "H200-141GB", "count": 64}  # more GPUs than any one machine has


@pytest.fixture(scope="module")
def shell() -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    ipython = InteractiveShell.instance()
    ipython.run_line_magic("load_ext", "gpugeek_jupyter")
    yield ipython


def through_magic(shell: Any, options: dict[str, Any]) -> str:
    from gpugeek_jupyter.magics._common import FLAGS

    flags = {key: FLAGS.get(key, "--" + key.replace("_", "-")) for key in options}
    line = " ".join(f"{flags[key]} {shlex.quote(str(value))}" for key, value in options.items())
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpugeek_launch", line + " --quiet")
    return str(raised.value)


def through_python(options: dict[str, Any]) -> str:
    with pytest.raises(GpugeekError) as raised:
        gpugeek_jupyter.launch(**options)
    return str(raised.value)


def through_server(options: dict[str, Any]) -> str:
    with pytest.raises(GpugeekError) as raised:
        parse_launch_body(json.dumps(options).encode())
    return str(raised.value)


FIELD_RULES = [
    pytest.param(
        {"count": 0},
        "--count must be a whole number from 1 to 1024, got '0' (e.g. --count 4)",
        "count must be a whole number from 1 to 1024, got 0 (e.g. count=4)",
        '"count" must be a whole number from 1 to 1024, got 0 (e.g. "count": 4)',
        id="count",
    ),
    pytest.param(
        {"spot_fraction": 1.5},
        "--spot-fraction must be a number from 0 to 1, got '1.5' (e.g. --spot-fraction 0.7)",
        "spot_fraction must be a number from 0 to 1, got 1.5 (e.g. spot_fraction=0.7)",
        '"spot_fraction" must be a number from 0 to 1, got 1.5 (e.g. "spot_fraction": 0.7)',
        id="spot_fraction",
    ),
    pytest.param(
        {"gpu_type": "V100"},
        "unknown GPU type 'V100' (choose one of cpu, T4, L4, L40S, A100-40GB, A100-80GB, H100-80GB, H200-141GB; "
        "e.g. --gpu-type A100-80GB)",
        "unknown GPU type 'V100' (choose one of cpu, T4, L4, L40S, A100-40GB, A100-80GB, H100-80GB, H200-141GB; "
        "e.g. gpu_type='A100-80GB')",
        'unknown GPU type "V100" (choose one of cpu, T4, L4, L40S, A100-40GB, A100-80GB, H100-80GB, H200-141GB; '
        'e.g. "gpu_type": "A100-80GB")',
        id="gpu_type",
    ),
    pytest.param(
        {"base_pricing": "free"},
        "--base-pricing must be on-demand or reserved, got 'free' (e.g. --base-pricing reserved)",
        "base_pricing must be on-demand or reserved, got 'free' (e.g. base_pricing='reserved')",
        '"base_pricing" must be on-demand or reserved, got "free" (e.g. "base_pricing": "reserved")',
        id="base_pricing",
    ),
    pytest.param(
        {"backend": "local", "address": "tcp://10.0.0.9:8786"},
        "--address 'tcp://10.0.0.9:8786' only applies to --backend address "
        "(e.g. --backend address --address tcp://10.0.0.5:8786)",
        "address 'tcp://10.0.0.9:8786' only applies to backend='address' "
        "(e.g. backend='address', address='tcp://10.0.0.5:8786')",
        '"address" "tcp://10.0.0.9:8786" only applies to "backend": "address" '
        '(e.g. "backend": "address", "address": "tcp://10.0.0.5:8786")',
        id="address-without-backend-address",
    ),
]


@pytest.mark.parametrize(("options", "magic", "python", "server"), FIELD_RULES)
def test_the_same_bad_value_is_phrased_by_each_surface(
    shell: Any, options: dict[str, Any], magic: str, python: str, server: str
) -> None:
    assert through_magic(shell, {k: str(v) for k, v in options.items()}) == magic
    assert through_python(options) == python
    assert through_server(options) == server


@pytest.mark.parametrize("bad_name", ["\n", "dev\nrm -rf /", "a\rb", "tab\there"])
def test_a_name_with_control_characters_gives_one_line_on_every_surface(shell: Any, bad_name: str) -> None:
    messages = {
        "magic": through_magic(shell, {"name": bad_name}),
        "python": through_python({"name": bad_name}),
        "server": through_server({"name": bad_name}),
    }
    for surface, message in messages.items():
        assert "\n" not in message and "\r" not in message, (surface, message)
    assert repr(bad_name) in messages["magic"] and messages["magic"].startswith("--name must be")
    assert repr(bad_name) in messages["python"] and messages["python"].startswith("name must be")
    assert json.dumps(bad_name) in messages["server"] and messages["server"].startswith('"name" must')
    assert "e.g. --name dev" in messages["magic"] and "e.g. name='dev'" in messages["python"]


def test_a_pool_name_in_use_is_phrased_with_each_surfaces_way_to_stop_it(shell: Any) -> None:
    error = ConflictError.pool_name_taken("dev")
    assert str(error) == "a pool named 'dev' is already running (stop it first, or pick another name)"
    assert error.phrase(Surface.PYTHON) == (
        "a pool named 'dev' is already running (stop it with pool.stop(), or pick another name)"
    )
    assert error.phrase(Surface.MAGIC) == (
        "a pool named 'dev' is already running (stop it with %gpugeek_stop dev, or pick another --name)"
    )
    assert error.phrase(Surface.SERVER) == (
        'a pool named "dev" is already running (stop it with DELETE /gpugeek/pools/dev, or pick another "name")'
    )
    assert (error.field, error.value, error.http_status) == ("name", "dev", 409)


def _register_live_pool(name: str) -> None:
    from gpugeek_jupyter.pricing import prices_in_force
    from gpugeek_jupyter.store import PoolStatus, get_registry

    spec = PoolSpec.create(gpu_type="cpu", count=1, backend="local", name=name)
    registry = get_registry()
    record = registry.add_pool(spec.name, spec.backend, spec.to_dict(), prices_in_force(spec), owner="kernel 1")
    registry.set_pool_status(record.id, PoolStatus.READY, scheduler_address="tcp://127.0.0.1:9", dashboard_link=None)


def test_launching_a_live_pools_name_from_a_magic_names_gpugeek_stop(shell: Any) -> None:
    _register_live_pool("taken")
    assert through_magic(shell, {"gpu_type": "cpu", "name": "taken"}) == (
        "a pool named 'taken' is already running (stop it with %gpugeek_stop taken, or pick another --name)"
    )


def test_launching_a_live_pools_name_from_python_names_no_magic() -> None:
    _register_live_pool("taken")
    message = through_python({"gpu_type": "cpu", "name": "taken"})
    assert "%gpugeek" not in message and "--name" not in message


def test_gpus_this_machine_lacks_are_phrased_by_each_surface(shell: Any) -> None:
    magic = through_magic(shell, NO_SUCH_GPUS)
    python = through_python(NO_SUCH_GPUS)
    assert magic.startswith("--gpu-type H200-141GB --count 64 needs 64 x H200-141GB, but this machine has ")
    assert magic.endswith(
        "; use --gpu-type cpu here, or --backend kubernetes / --backend address for a cluster that has them"
    )
    assert python.startswith("gpu_type='H200-141GB', count=64 needs 64 x H200-141GB")
    assert python.endswith(
        "; use gpu_type='cpu' here, or backend='kubernetes' / backend='address' for a cluster that has them"
    )
    with pytest.raises(GpugeekError) as raised:
        from gpugeek_jupyter.pools.local import LocalBackend

        LocalBackend().preflight(PoolSpec.create(**NO_SUCH_GPUS))
    server = raised.value.phrase(Surface.SERVER)
    assert server.startswith('"gpu_type": "H200-141GB", "count": 64 needs 64 x H200-141GB')
    assert '; use "gpu_type": "cpu" here, or "backend": "kubernetes" / "backend": "address"' in server
    for message in (magic, python, server):
        assert "\n" not in message


@pytest.mark.parametrize(
    ("env", "python", "magic"),
    [
        ({"RANK": "3"}, "env={'RANK': '3'}: torchrun's own variables", "--env 'RANK': torchrun's own variables"),
        (
            {"A": "x\0y"},
            "env={'A': 'x\\x00y'}: a value cannot contain a NUL character (e.g. env={'NCCL_DEBUG': 'INFO'})",
            "--env 'A': a value cannot contain a NUL character (e.g. --env NCCL_DEBUG=INFO)",
        ),
        ({"1A": "x"}, "env={'1A': 'x'}: a name must be letters", "--env '1A': a name must be letters"),
    ],
)
def test_a_bad_job_variable_is_phrased_as_env_or_as_the_env_flag(env: dict[str, str], python: str, magic: str) -> None:
    with pytest.raises(JobEnvError) as raised:
        check_job_env(env)
    assert str(raised.value).startswith(python)
    assert raised.value.phrase(Surface.MAGIC).startswith(magic)
    assert raised.value.field == "env"


def test_env_that_is_not_a_mapping_is_named_with_its_value() -> None:
    with pytest.raises(JobEnvError) as raised:
        check_job_env(["A=1"])  # type: ignore[arg-type]
    assert str(raised.value) == (
        "env must be a mapping of variable names to values, got ['A=1'] (e.g. env={'NCCL_DEBUG': 'INFO'})"
    )
    with pytest.raises(JobEnvError) as raised:
        parse_assignments(["NOEQUALS"])
    assert raised.value.phrase(Surface.MAGIC) == "--env 'NOEQUALS': give it as NAME=VALUE (e.g. --env NCCL_DEBUG=INFO)"


def test_job_options_are_phrased_as_keywords_or_flags() -> None:
    from gpugeek_jupyter.jobs.payload import ScriptCode
    from gpugeek_jupyter.jobs.request import JobRequest

    code = ScriptCode(path="train.py", abspath="/tmp/train.py", source="", args=(), cwd="/tmp")
    for options, python, magic in (
        (
            {"timeout": 0},
            "timeout must be a number of seconds > 0, got 0 (e.g. timeout=600)",
            "--timeout must be a number of seconds > 0, got 0 (e.g. --timeout 600)",
        ),
        (
            {"max_restarts": -1},
            "max_restarts must be a whole number >= 0, got -1 (e.g. max_restarts=2)",
            "--max-restarts must be a whole number >= 0, got -1 (e.g. --max-restarts 2)",
        ),
        (
            {"amp": "fp8"},
            "amp must be bf16 or fp16, got 'fp8' (e.g. amp='bf16')",
            "--amp must be bf16 or fp16, got 'fp8' (e.g. --amp bf16)",
        ),
    ):
        with pytest.raises(SpecError) as raised:
            JobRequest(code=code, sha256="0", **options).validate()
        assert (str(raised.value), raised.value.phrase(Surface.MAGIC)) == (python, magic)


def test_core_messages_name_no_magic() -> None:
    """The default str() of the core's errors: keyword names only, whatever was wrong."""
    bad_inputs: list[dict[str, Any]] = [
        {"count": "0"},
        {"gpu_type": "V100"},
        {"backend": "pbs"},
        {"spot_fraction": "2"},
        {"budget": "-1"},
        {"idle_timeout": "soon"},
        {"price": "-2"},
        {"name": "Not Valid"},
        {"base_pricing": "free"},
        {"framework": "TF 1"},
        {"backend": "address"},
        {"backend": "address", "address": "nowhere"},
        {"address": "tcp://1.2.3.4:8786"},
        {"gpu_type": "T4", "interconnect": "NVLink"},
        {"backend": "kubernetes", "namespace": "Team_Risk"},
    ]
    for options in bad_inputs:
        with pytest.raises(SpecError) as raised:
            PoolSpec.create(**options)
        message = str(raised.value)
        assert "--" not in message and "%gpugeek" not in message and "\n" not in message, message


def test_values_are_written_on_one_line_and_cut_when_long() -> None:
    python, magic, server = (Syntax(s) for s in (Surface.PYTHON, Surface.MAGIC, Surface.SERVER))
    assert python.value("a\nb") == "'a\\nb'" and server.value("a\nb") == '"a\\nb"'
    assert magic.setting("name", "two words") == "--name 'two words'"
    assert magic.setting("env", {"A": "1", "B": "2"}) == "--env A=1 --env B=2"
    assert magic.setting("all_pools", True) == "--all-pools"
    assert Syntax(Surface.MAGIC, {"all_pools": "--all"}).setting("all_pools", True) == "--all"
    assert python.setting("count", 4) == "count=4" and server.setting("count", 4) == '"count": 4'
    long = python.value("x" * 500)
    assert len(long) <= 80 and long.endswith("...")

    class Multiline:
        def __repr__(self) -> str:
            return "line one\nline two"

    assert "\n" not in python.value(Multiline())


def test_braces_in_a_value_are_not_placeholders() -> None:
    error = SpecError(field="name", value="{field}{0}", rule="a name", example="dev")
    assert str(error) == "name must be a name, got '{field}{0}' (e.g. name='dev')"
    assert str(SpecError("plain text {with} braces", field="x")) == "plain text {with} braces"


def test_a_hint_falls_back_to_the_core_text_on_surfaces_it_does_not_name() -> None:
    error = GpugeekError(Phrase("no pool ({hint})", hint=PerSurface(core="launch one", magic="%gpugeek_launch")))
    assert [error.phrase(s) for s in Surface] == [
        "no pool (launch one)",
        "no pool (launch one)",
        "no pool (%gpugeek_launch)",
        "no pool (launch one)",
    ]


def test_an_error_keeps_its_facts_and_surface_through_pickle() -> None:
    error = SpecError(
        Phrase("{field} {value} only applies to {backend}", backend=Setting(backend="address")),
        field="address",
        value="x",
        rule="only with backend 'address'",
        example="tcp://127.0.0.1:8786",
    ).in_surface(Surface.MAGIC)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == "--address 'x' only applies to --backend address"
    assert (copy.field, copy.value, copy.rule, copy.example) == (
        "address",
        "x",
        "only with backend 'address'",
        "tcp://127.0.0.1:8786",
    )
    env_copy = pickle.loads(pickle.dumps(JobEnvError("a rule", "A", "1")))
    assert (env_copy.name, env_copy.value, str(env_copy)) == (
        "A",
        "1",
        "env={'A': '1'}: a rule (e.g. env={'NCCL_DEBUG': 'INFO'})",
    )
