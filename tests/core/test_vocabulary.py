"""One vocabulary: an option has one name on every surface that takes it.

A magic's flag is the Python keyword with '-' for '_', and the JSON field is the keyword itself:
``--gpu-type`` / ``gpu_type=`` / ``"gpu_type"``. The surfaces are read, not listed by hand: the
magics' argparse parsers (IPython's ``magic_arguments``), the signatures of the Python API, and the
REST description (``server/openapi.json``, with ``server/launch_request.py``'s field table).

Each operation below names what it is on each surface. Every option of an operation must be on all
of its surfaces, by the same name, unless :data:`ONLY_ON` says it belongs to some of them and why
(a widget, a notebook variable, a callback), or :data:`NOT_YET` records a gap still to close. A
concept spelled differently on one surface (``--job`` against ``job_id=``) shows up as two names,
each missing from the other surface, and fails with both named.
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import pytest

import gpugeek_jupyter
from gpugeek_jupyter.client import ClusterClient, Job
from gpugeek_jupyter.config import BACKENDS
from gpugeek_jupyter.cost.ledger import record_data_volume
from gpugeek_jupyter.cost.tco import compare_owned, cost_report
from gpugeek_jupyter.cost.team import team_report
from gpugeek_jupyter.magics import _MAGIC_CLASSES
from gpugeek_jupyter.magics._common import FLAGS, POOL_POSITIONAL
from gpugeek_jupyter.schedules import list_schedules
from gpugeek_jupyter.server.launch_request import LAUNCH_FIELDS
from gpugeek_jupyter.spec import LAUNCH_FIELDS as SPEC_LAUNCH_FIELDS
from gpugeek_jupyter.spec import PoolSpec

MAGIC, PYTHON, REST = "magic", "python", "rest"


# -- the surfaces, read ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MagicOption:
    magic: str
    dest: str
    flags: tuple[str, ...]  # () for a positional argument
    hidden: bool  # help=SUPPRESS: an old spelling that still works
    default: Any

    @property
    def concept(self) -> str:
        """The keyword this option stands for: ``--no-jobs`` is ``jobs``, the pool word is ``pool``."""
        if self.dest == POOL_POSITIONAL:
            return "pool"
        return self.dest.removeprefix("no_") if any(f.startswith("--no-") for f in self.flags) else self.dest


def magic_functions() -> dict[str, Callable[..., Any]]:
    """Every magic the extension registers, line and cell, by name."""
    found: dict[str, Callable[..., Any]] = {}
    for module_name, class_name in _MAGIC_CLASSES:
        magics_class = getattr(import_module(module_name), class_name)
        for kind in ("line", "cell"):
            for name, method in magics_class.magics[kind].items():
                found[name] = getattr(magics_class, method)
    return found


def magic_options(name: str) -> list[MagicOption]:
    parser = getattr(magic_functions()[name], "parser", None)
    if parser is None:  # takes no options (%gpugeek_doctor)
        return []
    return [
        MagicOption(name, action.dest, tuple(action.option_strings), action.help == argparse.SUPPRESS, action.default)
        for action in parser._actions
    ]


# keyword arguments collected into **options and handed on: whose keywords they are
FORWARDS: dict[Callable[..., Any], Callable[..., Any]] = {
    gpugeek_jupyter.launch: PoolSpec.create,
    ClusterClient.create_job: PoolSpec.create,
    ClusterClient.schedule: gpugeek_jupyter.schedule,
}


def python_names(function: Callable[..., Any]) -> set[str]:
    names = set()
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name in ("self", "cls"):
            continue
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            assert function in FORWARDS, f"{function.__qualname__}(**{parameter.name}): add whose keywords to FORWARDS"
            names |= python_names(FORWARDS[function])
        elif parameter.kind is not inspect.Parameter.VAR_POSITIONAL:
            names.add(parameter.name)
    return names


def openapi() -> dict[str, Any]:
    """The REST description as the server serves it (its LaunchRequest made from the launch fields)."""
    from gpugeek_jupyter.server.handlers import load_openapi_text

    return json.loads(load_openapi_text())


def rest_names(method: str, path: str) -> set[str]:
    """The JSON body's fields (POST) or the query parameters (GET) of a route."""
    spec = openapi()
    operation = spec["paths"][path][method.lower()]
    if "requestBody" in operation:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
        return set(schema["properties"])
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}


# -- what each operation is on each surface ---------------------------------------------------------
@dataclass(frozen=True)
class Operation:
    magics: tuple[str, ...]
    python: tuple[Callable[..., Any], ...] = ()
    rest: tuple[tuple[str, str], ...] = ()
    # functions a magic also calls: its options may be found there, but theirs are not required of it
    python_also: tuple[Callable[..., Any], ...] = ()

    def names(self) -> dict[str, set[str]]:
        by_surface = {MAGIC: {o.concept for m in self.magics for o in magic_options(m) if not o.hidden}}
        if self.python:
            by_surface[PYTHON] = set().union(*(python_names(f) for f in self.python))
        if self.rest:
            by_surface[REST] = set().union(*(rest_names(method, path) for method, path in self.rest))
        return by_surface


OPERATIONS: dict[str, Operation] = {
    "launch a pool": Operation(
        magics=("gpugeek_launch",),
        python=(gpugeek_jupyter.launch, ClusterClient.create_job),
        rest=(("POST", "/gpugeek/pools"),),
    ),
    "list pools": Operation(
        magics=("gpugeek_pools",), python=(gpugeek_jupyter.list_pools,), rest=(("GET", "/gpugeek/pools"),)
    ),
    "run on a pool": Operation(magics=("gpugeek_run",), python=(Job.run, ClusterClient.job_on)),
    "list jobs": Operation(magics=("gpugeek_jobs",), python=(ClusterClient.jobs,), rest=(("GET", "/gpugeek/jobs"),)),
    "report cost": Operation(
        magics=("gpugeek_cost",), python=(cost_report,), python_also=(record_data_volume, team_report)
    ),
    "compare owning with renting": Operation(magics=("gpugeek_tco",), python=(compare_owned,)),
    "schedule runs": Operation(
        magics=("gpugeek_schedule",),
        python=(gpugeek_jupyter.schedule, ClusterClient.schedule),
        rest=(("POST", "/gpugeek/schedules"),),
    ),
    "push values to the ranks": Operation(magics=("gpugeek_push",), python=(gpugeek_jupyter.push,)),
    "pull a value from a rank": Operation(magics=("gpugeek_pull",), python=(gpugeek_jupyter.pull,)),
    "list schedules": Operation(
        magics=("gpugeek_schedules",), python=(list_schedules,), rest=(("GET", "/gpugeek/schedules"),)
    ),
}

# magics with no counterpart of their own on another surface
STANDALONE: dict[str, str] = {
    "gpugeek_use": "makes a pool current for the magics; Python code holds the pool (ClusterClient().job_on(pool))",
    "gpugeek_stop": "a pool's name is its only input: Pool.stop() in Python, DELETE /gpugeek/pools/{name} in REST",
    "gpugeek_monitor": "a live widget; Python reads the same samples with pool.metrics()",
    "gpugeek_doctor": "checks this machine and takes no options (gpugeek-jupyter doctor in a terminal)",
    "gpugeek_where": "a report for people of where a running job's ranks are; the pool is its only input",
    "gpugeek_logs": "prints a job's logs for people; Python: JobResult.logs(rank)",
    "gpugeek_attach": "replays and follows a job's output for people; Python: gpugeek_jupyter.job(id).events()",
    "gpugeek_lineage": "a job's id or a checkpoint's path is its only input: gpugeek_jupyter.lineage(target) in "
    "Python, GET /gpugeek/jobs/{id}/lineage in REST",
    "gpugeek_cancel": "a job's id is its only input: gpugeek_jupyter.job(id).cancel() in Python, DELETE /gpugeek/jobs/{id} in REST",
}

# (operation, option) -> (the surfaces it is on, why it is on those only)
ONLY_ON: dict[tuple[str, str], tuple[set[str], str]] = {
    ("launch a pool", "dry_run"): (
        {MAGIC},
        "prints the Kubernetes manifests or the Slurm job script instead of launching; Python: "
        "k8s_manifest.render_manifests(spec), slurm.render_job_script(spec)",
    ),
    ("launch a pool", "quiet"): ({MAGIC}, "no pool card: the card is what the magic shows"),
    ("launch a pool", "price_file"): (
        {PYTHON},
        "a price file for one call; magics and the server read GpugeekConfig.price_file (GPUGEEK_PRICE_FILE)",
    ),
    ("run on a pool", "amp"): ({MAGIC}, "cells only: a script sets up torch.autocast itself"),
    ("run on a pool", "rank0"): ({MAGIC}, "cells only: a cell's last value comes back from each rank"),
    ("run on a pool", "monitor"): ({MAGIC}, "shows the utilization widget under the cell"),
    ("run on a pool", "out"): ({MAGIC}, "-o/--out stores the value in a notebook variable; Python returns it"),
    ("run on a pool", "ranks"): ({MAGIC}, "cells only: a script (Job.run) runs on every rank; run_cell(ranks=)"),
    ("run on a pool", "hyperparams"): ({PYTHON}, "on the magic line they are the script's arguments after --"),
    ("run on a pool", "on_output"): ({PYTHON}, "a callback; the magic prints the [rank N] lines itself"),
    ("run on a pool", "detach"): (
        {MAGIC},
        "Python has methods of their own for it: Job.submit(...) and Job.submit_cell(...) return a JobHandle",
    ),
    ("pull a value from a rank", "out"): (
        {MAGIC},
        "-o/--out stores the value in a notebook variable under another name; Python returns it",
    ),
    ("report cost", "registry"): ({PYTHON}, "the registry to read; a magic reads its process's"),
    ("report cost", "now"): ({PYTHON}, "a report as of a given time"),
    ("report cost", "csv"): ({MAGIC}, "Python writes the rows with tco.write_csv(rows, path)"),
    ("report cost", "chart"): ({MAGIC}, "a widget; Python: widgets.cost_chart.bar_chart(rows)"),
    ("report cost", "out"): ({MAGIC}, "-o/--out stores the report in a notebook variable; Python returns it"),
    ("report cost", "detail"): ({MAGIC}, "which columns the table shows; Python returns every part"),
    ("report cost", "team"): (
        {MAGIC},
        "the team's spend instead of this registry's: Python team_report(since=, until=, user=), REST GET "
        "/gpugeek/team?since=&until=&user=",
    ),
    ("compare owning with renting", "pool"): (
        {MAGIC},
        "the magic takes a pool's GPU type and count as defaults; compare_owned takes them directly",
    ),
    ("compare owning with renting", "out"): ({MAGIC}, "-o/--out stores the result in a notebook variable"),
    ("list pools", "detail"): (
        {MAGIC},
        "shows the autoscaling this kernel runs for its pools; Python reads it from the Autoscaling that "
        "pools.autoscale.autoscale(pool, policy) returns (.rules(), .pending(), .decisions())",
    ),
    ("compare owning with renting", "price_file"): (
        {PYTHON},
        "a price file for one call; the magic reads GpugeekConfig.price_file (GPUGEEK_PRICE_FILE)",
    ),
}

ONLY_ON.update(
    {
        ("schedule runs", "cell"): ({PYTHON}, "the cell magic's body is the cell; REST schedules scripts"),
        ("schedule runs", "namespace"): ({PYTHON}, "the notebook objects a cell uses; the magic takes the kernel's"),
        ("schedule runs", "hyperparams"): (
            {PYTHON, REST},
            "on the magic line they are the script's arguments after --",
        ),
        ("list schedules", "action"): (
            {MAGIC},
            "pause/resume/delete NAME: Schedule.pause() .resume() .delete() in Python, POST "
            "/gpugeek/schedules/{id}/pause|resume and DELETE /gpugeek/schedules/{id} in REST",
        ),
        ("list schedules", "schedule"): ({MAGIC}, "the schedule the action is for (see action)"),
    }
)

# Known gaps, to close (and then to delete from here): (operation, option) -> (surfaces it is on, what is missing)
NOT_YET: dict[tuple[str, str], tuple[set[str], str]] = {
    ("list pools", "live"): ({MAGIC}, "%gpugeek_pools --live is list_pools(live_only=True) and ?state=live"),
    ("list pools", "all"): ({MAGIC}, "%gpugeek_pools --all is list_pools() and, ended pools only, ?state=ended"),
    ("list pools", "live_only"): ({PYTHON}, "list_pools(live_only=True) is --live and ?state=live"),
    ("list pools", "state"): ({REST}, "?state=recent|live|ended: the magic and list_pools() have no state"),
    ("list pools", "namespace"): ({REST}, "?namespace=: neither %gpugeek_pools nor list_pools() filter by it"),
    ("list pools", "before"): ({REST}, "?before= pages the history; list_pools() returns it whole"),
    ("list pools", "limit"): ({REST}, "?limit= pages the history; list_pools() returns it whole"),
}

# flags that are not '--' + their keyword: the old spellings, still accepted and hidden from help
ALIASES: dict[tuple[str, str], tuple[str, str]] = {
    ("gpugeek_launch", "--pricing"): ("base_pricing", "the flag's name before it matched base_pricing="),
    ("gpugeek_run", "--script"): ("script_path", "the flag's name before it matched script_path="),
}
SHORT_FLAGS = {"-o": "out"}  # -o VAR (--out VAR) in every magic that stores a value

# magics that act on a pool: --pool NAME in all of them, and NAME as a word unless said otherwise
POOL_MAGICS = {
    "gpugeek_use",
    "gpugeek_stop",
    "gpugeek_cost",
    "gpugeek_tco",
    "gpugeek_monitor",
    "gpugeek_jobs",
    "gpugeek_where",
}
POOL_FLAG_ONLY = {
    "gpugeek_push": "its words are the notebook variables to send",
    "gpugeek_pull": "its word is the variable to fetch",
    "gpugeek_run": "its words are the script's arguments (after --)",
    "gpugeek_schedule": "its words are the script's arguments (after --)",
}


# -- the checks -------------------------------------------------------------------------------------------
def _presence(operation: Operation) -> dict[str, set[str]]:
    """option -> the surfaces of ``operation`` that have it."""
    by_surface = operation.names()
    also = set().union(*(python_names(f) for f in operation.python_also)) if operation.python_also else set()
    where: dict[str, set[str]] = {}
    for surface, names in by_surface.items():
        for name in names:
            where.setdefault(name, set()).add(surface)
    for name in set(where) & also:
        where[name].add(PYTHON)
    return where


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_option_has_one_name_on_every_surface_of_its_operation(name: str) -> None:
    operation = OPERATIONS[name]
    surfaces = set(operation.names())
    where = _presence(operation)
    problems = []
    for option, present in sorted(where.items()):
        if present == surfaces:
            continue
        expected = ONLY_ON.get((name, option)) or NOT_YET.get((name, option))
        if expected is not None and expected[0] == present:
            continue
        elsewhere = [o for o, p in where.items() if p.isdisjoint(present)]
        alike = difflib.get_close_matches(option, elsewhere, n=1, cutoff=0.5)
        hint = f" (the same as {alike[0]!r} on {'/'.join(sorted(where[alike[0]]))}?)" if alike else ""
        problems.append(f"{option!r} is on {'/'.join(sorted(present))} only{hint}")
    assert not problems, f"{name}: " + "; ".join(problems) + " -- name it alike everywhere, or say why in ONLY_ON"


def test_the_lists_of_exceptions_are_not_stale() -> None:
    for table_name, table in (("ONLY_ON", ONLY_ON), ("NOT_YET", NOT_YET)):
        for (operation, option), (surfaces, _why) in table.items():
            present = _presence(OPERATIONS[operation]).get(option, set())
            assert present == surfaces, f"{table_name}[{operation!r}, {option!r}]: it is on {present or 'none'} now"


def test_every_magic_is_an_operation_or_says_why_it_has_no_counterpart() -> None:
    described = {m for op in OPERATIONS.values() for m in op.magics} | set(STANDALONE)
    missing = sorted(set(magic_functions()) - described)
    assert not missing, f"add {missing} to OPERATIONS or STANDALONE in {__name__}"


@pytest.mark.parametrize("magic", sorted(magic_functions()))
def test_a_flag_is_its_keyword_with_dashes(magic: str) -> None:
    for option in magic_options(magic):
        for flag in option.flags:
            if option.hidden:
                assert ALIASES.get((magic, flag), (None,))[0] == option.dest, f"%{magic} {flag}: hidden, not in ALIASES"
            elif not flag.startswith("--"):
                assert SHORT_FLAGS.get(flag) == option.dest, f"%{magic} {flag}: a short flag not in SHORT_FLAGS"
            else:
                assert flag == "--" + option.dest.replace("_", "-"), f"%{magic} {flag} sets {option.dest!r}"


def test_a_flag_means_the_same_in_every_magic() -> None:
    meanings: dict[str, set[tuple[str, str]]] = {}
    for magic in magic_functions():
        for option in magic_options(magic):
            for flag in option.flags:
                if not option.hidden:
                    meanings.setdefault(flag, set()).add((option.dest, magic))
    clashes = {flag: sorted(uses) for flag, uses in meanings.items() if len({dest for dest, _ in uses}) > 1}
    assert not clashes


def test_every_magic_that_acts_on_a_pool_takes_it_the_same_way() -> None:
    for magic in magic_functions():
        options = {o.dest: o for o in magic_options(magic) if not o.hidden}
        takes_pool = "pool" in options
        assert takes_pool == (magic in POOL_MAGICS | set(POOL_FLAG_ONLY)), f"%{magic}: --pool NAME?"
        if not takes_pool:
            assert POOL_POSITIONAL not in options
            continue
        assert options["pool"].flags == ("--pool",)
        assert (POOL_POSITIONAL in options) == (magic not in POOL_FLAG_ONLY), f"%{magic}: NAME as a word?"


def test_error_messages_name_flags_that_exist() -> None:
    flags = {flag for magic in magic_functions() for option in magic_options(magic) for flag in option.flags}
    for keyword, flag in FLAGS.items():
        assert flag == "--" or flag in flags, f"FLAGS[{keyword!r}] = {flag!r}: no magic has it"


def test_the_launch_request_checks_the_fields_the_rest_description_lists() -> None:
    assert set(LAUNCH_FIELDS) == rest_names("POST", "/gpugeek/pools")


def _openapi_types(description: dict[str, Any]) -> tuple[set[str], bool, set[Any]]:
    """(JSON types, null allowed, enum values) of one property of the REST description."""
    enum = set(description.get("enum", ()))
    declared = description.get("type")
    types = {declared} if isinstance(declared, str) else set(declared or ())
    if enum and not types:  # an enum without a type: its values' types
        types = {"string" if isinstance(v, str) else "null" for v in enum}
    nullable = "null" in types or None in enum
    return types - {"null"}, nullable, enum - {None}


def test_the_launch_fields_are_declared_once_and_every_surface_agrees_with_the_declaration() -> None:
    """spec.LAUNCH_FIELDS: the magic's options and the REST checks are made from it; PoolSpec.create
    and openapi.json say the same."""
    declared = {f.name: f for f in SPEC_LAUNCH_FIELDS}
    keywords = set(inspect.signature(PoolSpec.create).parameters) - {"cls", "price_file"}  # price_file: Python only
    assert {n for n, f in declared.items() if f.spec_field} == keywords
    assert keywords <= set(PoolSpec.__dataclass_fields__)
    options = {o.dest: o for o in magic_options("gpugeek_launch") if not o.hidden}
    schema = openapi()["components"]["schemas"]["LaunchRequest"]["properties"]
    assert set(schema) == set(declared)
    for name, field in declared.items():
        assert options[name].flags == (field.flag,), name
        types, nullable, enum = _openapi_types(schema[name])
        assert (types, nullable) == ({field.json_type}, field.nullable), name
        assert enum == set(field.choices), name
        assert LAUNCH_FIELDS[name][1:] == (field.nullable, field.example), name


def test_launch_defaults_agree_between_the_magic_the_python_api_and_rest() -> None:
    """``%gpugeek_launch`` with no options, ``launch()`` and ``POST {}`` ask for the same pool."""
    create = inspect.signature(PoolSpec.create).parameters
    schema = openapi()["components"]["schemas"]["LaunchRequest"]["properties"]
    for option in magic_options("gpugeek_launch"):
        if option.dest in create and option.default not in (None, False):
            assert option.default == str(create[option.dest].default), option.dest
    for field, description in schema.items():
        if "default" in description:
            assert description["default"] == create[field].default, field


def test_a_bad_job_limit_is_refused_alike_by_the_magic_and_the_python_api() -> None:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    from gpugeek_jupyter.errors import SpecError
    from gpugeek_jupyter.magics.run import JobMagics

    shell = InteractiveShell.instance()
    shell.register_magics(JobMagics)
    with pytest.raises(UsageError) as magic:
        shell.run_line_magic("gpugeek_jobs", "--limit 0")
    with pytest.raises(SpecError) as python:
        ClusterClient().jobs(limit=0)
    assert str(magic.value) == "--limit must be a whole number >= 1, got '0' (e.g. --limit 20)"
    assert str(python.value) == "limit must be a whole number >= 1, got 0 (e.g. limit=20)"


def test_the_rest_launch_schema_is_made_from_the_declaration_bounds_backends_and_examples_included() -> None:
    schema = openapi()["components"]["schemas"]["LaunchRequest"]
    assert schema["additionalProperties"] is False and list(schema["properties"]) == [
        f.name for f in SPEC_LAUNCH_FIELDS
    ]
    count, partition, backend = (schema["properties"][name] for name in ("count", "partition", "backend"))
    assert (count["type"], count["minimum"], count["maximum"], count["default"]) == ("integer", 1, 1024, 1)
    assert partition["type"] == ["string", "null"] and partition["x-backends"] == ["slurm"]
    assert "x-backends" not in backend and backend["enum"] == list(BACKENDS)
    for field in SPEC_LAUNCH_FIELDS:  # every example is a value the REST checks accept
        assert schema["properties"][field.name]["examples"] == [field.example]
        assert schema["properties"][field.name]["description"] == field.help
        magic_flag = r"(?<!sbatch )--(" + "|".join(f.name.replace("_", "-") for f in SPEC_LAUNCH_FIELDS) + r")\b"
        assert not re.search(magic_flag, field.help), f"{field.name}'s help speaks of a magic flag: {field.help!r}"
