"""Every magic's help (``%gpugeek_cost?``) starts with an example, and its examples parse; the pool a
magic acts on is named the same way in all of them (in-process shell, no pool processes)."""

from __future__ import annotations

import inspect
import re
import shlex
from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gpugeek_jupyter.magics import _MAGIC_CLASSES
from gpugeek_jupyter.store import get_registry


def magic_functions() -> dict[str, Callable[..., Any]]:
    found = {}
    for module_name, class_name in _MAGIC_CLASSES:
        magics_class = getattr(import_module(module_name), class_name)
        for kind in ("line", "cell"):
            for name, method in magics_class.magics[kind].items():
                found[name] = getattr(magics_class, method)
    return found


def own_docstring(magic: Callable[..., Any]) -> str:
    """The docstring as written (``magic_arguments`` puts the usage and options around it)."""
    parser = getattr(magic, "parser", None)
    return inspect.cleandoc(parser.description if parser is not None else magic.__doc__ or "")


@pytest.mark.parametrize("name", sorted(magic_functions()))
def test_help_starts_with_an_example_of_the_magic_itself(name: str) -> None:
    lines = own_docstring(magic_functions()[name]).splitlines()
    assert lines[0] == "Example::", f"%{name}? starts with {lines[0]!r}"
    example = [line.strip() for line in lines[2 : lines.index("", 2)]]  # the block after "Example::"
    assert re.match(rf"In \[1\]: %%?{name}\b", example[0]), f"%{name}'s example is {example[0]!r}"
    assert [line for line in example[1:] if not line.startswith("...:")], f"%{name}'s example shows no output"


@pytest.mark.parametrize("name", sorted(magic_functions()))
def test_every_example_in_the_help_parses(name: str) -> None:
    magic = magic_functions()[name]
    parser = getattr(magic, "parser", None)
    examples = [
        m.group(1)
        for line in own_docstring(magic).splitlines()
        if (m := re.match(rf"\s*In \[\d+\]: %%?{name}(?:\s+(.*?))?\s*(?:#.*)?$", line))
    ]
    assert examples
    for options in examples:
        words = shlex.split(options or "")
        if parser is None:
            assert not words, f"%{name} takes no options, its help shows {options!r}"
        else:
            parser.parse_args(words)  # a UsageError names the option


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    from gpugeek_jupyter.magics.cost import CostMagics
    from gpugeek_jupyter.magics.monitor import MonitorMagics
    from gpugeek_jupyter.magics.pools import PoolMagics
    from gpugeek_jupyter.magics.run import JobMagics

    ip = InteractiveShell.instance()
    for magics_class in (PoolMagics, MonitorMagics, CostMagics, JobMagics):
        ip.register_magics(magics_class)
    yield ip


@pytest.mark.parametrize(
    ("magic", "line", "message"),
    [
        ("gpugeek_use", "ghost", r"^no running pool named 'ghost'"),
        ("gpugeek_use", "--pool ghost", r"^no running pool named 'ghost'"),
        ("gpugeek_use", "", r"^name the pool to use \(e.g. %gpugeek_use dev\)$"),
        ("gpugeek_use", "a --pool b", r"^two pools named, 'a' and --pool 'b': name one \(e.g. %gpugeek_use dev\)$"),
        ("gpugeek_stop", "--pool ghost", r"^no running pool named 'ghost'"),
        ("gpugeek_stop", "ghost --all", r"^name one pool or pass --all, not both and not neither"),
        ("gpugeek_stop", "--pool ghost --all", r"^name one pool or pass --all, not both and not neither"),
        ("gpugeek_monitor", "ghost", r"^no running pool named 'ghost'"),
        ("gpugeek_monitor", "--pool ghost --table", r"^no running pool named 'ghost'"),
        ("gpugeek_jobs", "ghost", r"^no pool named 'ghost' in the registry"),
        ("gpugeek_jobs", "--pool ghost", r"^no pool named 'ghost' in the registry"),
        ("gpugeek_cost", "ghost", r"^no pool named 'ghost' in the registry"),
        ("gpugeek_cost", "--pool ghost", r"^no pool named 'ghost' in the registry"),
        ("gpugeek_tco", "--pool ghost --hours-per-month 10", r"^no pool named 'ghost' in the registry"),
        ("gpugeek_run", "--pool ghost", r"^no running pool named 'ghost'"),
    ],
)
def test_a_pool_is_named_by_a_word_or_by_pool_in_every_magic(
    shell: InteractiveShell, magic: str, line: str, message: str
) -> None:
    get_registry()  # the isolated one
    with pytest.raises(UsageError, match=message) as caught:
        if magic == "gpugeek_run":
            shell.run_cell_magic(magic, line, "rank")
        else:
            shell.run_line_magic(magic, line)
    assert "\n" not in str(caught.value)


def test_old_flag_spellings_still_work_and_stay_out_of_the_help(shell: InteractiveShell) -> None:
    launch = magic_functions()["gpugeek_launch"].parser  # type: ignore[attr-defined]
    assert launch.parse_args(["--pricing", "reserved"]).base_pricing == "reserved"
    assert launch.parse_args(["--base-pricing", "reserved"]).base_pricing == "reserved"
    run = magic_functions()["gpugeek_run"].parser  # type: ignore[attr-defined]
    assert run.parse_args(["--script", "train.py"]).script_path == "train.py"
    assert "--pricing" not in launch.format_help() and "--script " not in run.format_help()
    with pytest.raises(UsageError, match=r"^--script is for the line magic \(e.g. %gpugeek_run --script-path "):
        shell.run_cell_magic("gpugeek_run", "--script train.py", "rank")
    with pytest.raises(UsageError, match=r"^--script-path is for the line magic"):
        shell.run_cell_magic("gpugeek_run", "--script-path train.py", "rank")


def test_track_is_a_flag_with_an_optional_uri_and_a_bad_one_is_one_line(shell: InteractiveShell, cpu_pool: Any) -> None:
    run = magic_functions()["gpugeek_run"].parser  # type: ignore[attr-defined]
    assert run.parse_args([]).track is None and run.parse_args(["--track"]).track is True
    assert run.parse_args(["--track", "http://127.0.0.1:5000"]).track == "http://127.0.0.1:5000"
    assert run.parse_args(["--no-track"]).no_track is True
    with pytest.raises(UsageError, match=r"^--track and --no-track ask for opposite things"):
        shell.run_cell_magic("gpugeek_run", "--pool test-pool --track --no-track", "rank")
    with pytest.raises(UsageError) as caught:  # no GPUGEEK_MLFLOW_URI here
        shell.run_cell_magic("gpugeek_run", "--pool test-pool --track", "rank")
    assert str(caught.value) == (
        "--track needs a tracking server: set GPUGEEK_MLFLOW_URI (GpugeekConfig.mlflow_tracking_uri), "
        "or name one (e.g. --track http://127.0.0.1:5000)"
    )


def test_a_line_parsed_again_gives_the_same_options_as_a_copy_of_its_own() -> None:
    """Option lines are parsed once (a notebook sends the same few again and again): each caller gets
    options it may change without changing the next caller's."""
    from gpugeek_jupyter.magics import _common

    run = magic_functions()["gpugeek_run"]
    line = "--pool dev --env A=1 --env B=2 --timeout 60"
    first = _common.parse_options(run, line, "--pool dev")
    first.env.append("C=3")
    first.timeout = "1"
    again = _common.parse_options(run, line, "--pool dev")
    assert (again.pool, again.env, again.timeout) == ("dev", ["A=1", "B=2"], "60")
    assert vars(again) == vars(_common._parse(run, line, "--pool dev"))
    with pytest.raises(UsageError, match=r"--no-such-flag.*e\.g\. %gpugeek_run --pool dev"):
        _common.parse_options(run, "--no-such-flag", "--pool dev")
    for n in range(_common.PARSED_LINES_KEPT + 10):
        _common.parse_options(run, f"--pool p{n}", "--pool dev")
    assert len(_common._parsed) == _common.PARSED_LINES_KEPT
