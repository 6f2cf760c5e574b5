"""One exception hierarchy for the whole package, phrased by the surface that received the input.

Every error a user can cause derives from :class:`GpugeekError`. A field error carries its facts
(``field``, the Python keyword name; the bad ``value``; the ``rule`` it breaks; a valid
``example`` value), and its message is a :class:`Phrase` whose parts are written in the syntax of
the surface that shows it:

>>> error = SpecError(field="count", value=0, rule="a whole number from 1 to 1024", example=4)
>>> str(error)                                          # the core and the Python API
'count must be a whole number from 1 to 1024, got 0 (e.g. count=4)'
>>> error.phrase(Surface.MAGIC)                         # %gpugeek_launch --count 0
'--count must be a whole number from 1 to 1024, got 0 (e.g. --count 4)'
>>> error.phrase(Surface.SERVER)                        # POST /gpugeek/pools {"count": 0}
'"count" must be a whole number from 1 to 1024, got 0 (e.g. "count": 4)'

Parts: :class:`Field` (``count`` / ``--count`` / ``"count"``), :class:`Value` (``repr()``; JSON for
the server), :class:`Setting` (``count=4`` / ``--count 4`` / ``"count": 4``) and
:class:`PerSurface`, a hint written once per surface (``%gpugeek_stop dev`` for a magic,
``pool.stop()`` for Python) with a neutral core text for the others. Every value is rendered on one
line, so every message is one line.

Adapters choose the surface, and only they: magics raise ``UsageError(error.phrase(Surface.MAGIC))``
(``magics._common.usage_errors``); the Python API (``launch``, ``ClusterClient``, ``Job.run``) and the
server's launch request (``server.launch_request``) mark errors with :func:`phrased_for`, so that
``str()`` speaks their syntax; the server maps :attr:`GpugeekError.http_status` to the HTTP code.
Unmarked errors speak the neutral core phrasing. A plain ``str`` message is shown as it is everywhere.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import json
import shlex
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Protocol, Self

MAX_VALUE_CHARS = 80  # a value longer than this is cut ("..."), so a message stays readable


class Surface(enum.StrEnum):
    """Where the input came from, and so the syntax its errors are phrased in."""

    CORE = "core"  # neutral: keyword names, no command of any one surface (the default str())
    PYTHON = "python"  # gpugeek_jupyter.launch(count=4), ClusterClient().create_job(...), job.run(...)
    MAGIC = "magic"  # %gpugeek_launch --count 4, %%gpugeek_run --timeout 600
    SERVER = "server"  # POST /gpugeek/pools {"count": 4}


# -- the syntax of each surface ------------------------------------------------------------------------
def _one_line(text: str) -> str:
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def _json(value: Any) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Syntax:
    """How one surface writes an option's name, a value, and an option set to a value.

    ``flags`` renames options for a magic whose flag is not ``--`` + the keyword with '-' for '_'
    (for example an option that is a positional argument there: an empty flag).
    """

    surface: Surface
    flags: Mapping[str, str] = dataclass_field(default_factory=dict)

    def flag(self, name: str) -> str:
        """The magic flag of keyword ``name``: ``spot_fraction`` -> ``--spot-fraction``."""
        return self.flags.get(name, "--" + name.replace("_", "-"))

    def name(self, name: str) -> str:
        """``count``, ``--count`` or ``"count"``."""
        if self.surface is Surface.MAGIC:
            return self.flag(name)
        if self.surface is Surface.SERVER:
            return json.dumps(name)
        return name

    def value(self, value: Any) -> str:
        """A value as the user gave it: its ``repr()`` (JSON on the server), on one line."""
        shown = _json(value) if self.surface is Surface.SERVER else None
        return _one_line(shown if shown is not None else repr(value))

    def setting(self, name: str, value: Any) -> str:
        """``count=4``, ``--count 4`` or ``"count": 4``."""
        if self.surface is Surface.MAGIC:
            return _one_line(" ".join(self._magic_words(self.flag(name), value)))
        if self.surface is Surface.SERVER:
            return f"{json.dumps(name)}: {self.value(value)}"
        return f"{name}={self.value(value)}"

    @property
    def separator(self) -> str:
        """Between the settings of one example: ``a=1, b=2`` but ``--a 1 --b 2``."""
        return " " if self.surface is Surface.MAGIC else ", "

    @staticmethod
    def _magic_words(flag: str, value: Any) -> list[str]:
        prefix = [flag] if flag else []
        if value is True:
            return prefix
        if isinstance(value, Mapping):  # a repeatable NAME=VALUE option: --env A=1 --env B=2
            return [word for k, v in value.items() for word in (*prefix, shlex.quote(f"{k}={v}"))]
        if isinstance(value, list | tuple):
            return [*prefix, *(shlex.quote(str(v)) for v in value)]
        return [*prefix, shlex.quote(str(value))]


# -- the parts of a message --------------------------------------------------------------------------
class Part(Protocol):
    """A piece of a message that each surface writes in its own syntax."""

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str: ...


def render(part: Any, syntax: Syntax, context: Mapping[str, Any]) -> str:
    """A part in ``syntax``; text (``str``) is shown as it is; anything else with ``str()``."""
    if isinstance(part, str):
        return part
    render_part = getattr(part, "render", None)
    return render_part(syntax, context) if callable(render_part) else str(part)


@dataclass(frozen=True)
class Field:
    """An option's name: ``gpu_type`` (Python), ``--gpu-type`` (magic), ``"gpu_type"`` (JSON)."""

    name: str

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str:
        return syntax.name(self.name)


@dataclass(frozen=True)
class Value:
    """A value the user gave: ``repr()`` (JSON on the server), always on one line."""

    value: Any

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str:
        return syntax.value(self.value)


class Setting:
    """Options set to values: ``backend='address', address='tcp://...'`` / ``--backend address
    --address tcp://...`` / ``"backend": "address", "address": "tcp://..."``.

    >>> Setting(gpu_type="cpu").render(Syntax(Surface.MAGIC), {})
    '--gpu-type cpu'
    """

    __slots__ = ("pairs",)

    def __init__(self, **pairs: Any) -> None:
        self.pairs: tuple[tuple[str, Any], ...] = tuple(pairs.items())

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str:
        return syntax.separator.join(syntax.setting(name, value) for name, value in self.pairs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Setting) and other.pairs == self.pairs

    def __hash__(self) -> int:
        return hash(tuple(name for name, _ in self.pairs))

    def __repr__(self) -> str:
        return f"Setting({', '.join(f'{name}={value!r}' for name, value in self.pairs)})"

    def __reduce__(self) -> Any:
        return (_setting, (self.pairs,))


def _setting(pairs: tuple[tuple[str, Any], ...]) -> Setting:
    return Setting(**dict(pairs))


@dataclass(frozen=True)
class PerSurface:
    """A part written once per surface; surfaces not given use ``core`` (neutral: no command).

    >>> stop = PerSurface(core="stop it first", magic="stop it with %gpugeek_stop dev")
    >>> stop.render(Syntax(Surface.MAGIC), {}), stop.render(Syntax(Surface.SERVER), {})
    ('stop it with %gpugeek_stop dev', 'stop it first')
    """

    core: Any
    python: Any = None
    magic: Any = None
    server: Any = None

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str:
        chosen = getattr(self, syntax.surface.value) if syntax.surface is not Surface.CORE else None
        return render(self.core if chosen is None else chosen, syntax, context)


class Phrase:
    """A message template; ``{name}`` placeholders are parts, the error's facts by default.

    The facts give ``{field}`` (:class:`Field`), ``{value}`` (:class:`Value`), ``{rule}`` (text) and
    ``{example}`` (:class:`Setting` of the field to the example). Parts are rendered, then put in:
    a brace in a value is never read as a placeholder.

    >>> Phrase("{field} {value} is not a date (e.g. {example})").render(
    ...     Syntax(Surface.MAGIC), {"field": Field("since"), "value": Value("soon"),
    ...                             "example": Setting(since="2026-11-01")})
    "--since 'soon' is not a date (e.g. --since 2026-11-01)"
    """

    __slots__ = ("parts", "template")

    def __init__(self, template: str, **parts: Any) -> None:
        self.template = template
        self.parts = parts

    def render(self, syntax: Syntax, context: Mapping[str, Any]) -> str:
        return self.template.format_map(_Rendered(syntax, {**context, **self.parts}))

    def __repr__(self) -> str:
        return f"Phrase({self.template!r}, {self.parts!r})"

    def __reduce__(self) -> Any:
        return (_phrase, (self.template, self.parts))


class _Rendered(dict[str, str]):
    """The parts a template names, each rendered when the template asks for it."""

    def __init__(self, syntax: Syntax, parts: Mapping[str, Any]) -> None:
        super().__init__()
        self.syntax, self.parts = syntax, parts

    def __missing__(self, name: str) -> str:
        return render(self.parts[name], self.syntax, self.parts)


def _phrase(template: str, parts: dict[str, Any]) -> Phrase:
    return Phrase(template, **parts)


FIELD_RULE = Phrase("{field} must be {rule}, got {value} (e.g. {example})")


# -- the errors ------------------------------------------------------------------------------------------
class GpugeekError(Exception):
    """Base class; ``http_status`` is what the server extension answers with.

    ``message`` is a :class:`Phrase` (or another part), or plain text shown as it is everywhere.
    With ``field`` and ``rule`` and no message, the message is :data:`FIELD_RULE`: "{field} must be
    {rule}, got {value} (e.g. {example})". ``str()`` phrases for :attr:`surface` (core unless an
    adapter said otherwise, see :func:`phrased_for`); :meth:`phrase` for any surface.
    """

    http_status = 500

    def __init__(
        self,
        message: Any = "",
        field: str | None = None,
        *,
        value: Any = None,
        rule: str | None = None,
        example: Any = None,
    ) -> None:
        if isinstance(message, str) and not message and field is not None and rule is not None:
            message = FIELD_RULE
        self.message = message
        self.field = field
        self.value = value
        self.rule = rule
        self.example = example
        self.surface = Surface.CORE
        super().__init__(self.phrase(Surface.CORE))

    def facts(self) -> dict[str, Any]:
        """The parts the facts give a :class:`Phrase`: ``field``, ``value``, ``rule``, ``example``."""
        context: dict[str, Any] = {"value": Value(self.value), "rule": self.rule or ""}
        if self.field is not None:
            context["field"] = Field(self.field)
            example = self.example
            context["example"] = example if isinstance(example, Setting) else Setting(**{self.field: example})
        return context

    def phrase(self, surface: Surface | None = None, flags: Mapping[str, str] | None = None) -> str:
        """The message in the syntax of ``surface`` (default: :attr:`surface`); ``flags`` as for
        :class:`Syntax` (magics whose flags are not the keyword names)."""
        syntax = Syntax(self.surface if surface is None else surface, flags or {})
        return render(self.message, syntax, self.facts())

    def in_surface(self, surface: Surface) -> Self:
        """Make ``str()`` phrase for ``surface`` from now on; returns the error, to re-raise."""
        self.surface = surface
        return self

    def __str__(self) -> str:
        return self.phrase()

    def __reduce__(self) -> Any:
        # subclasses take other arguments than the message: rebuild from the state, not __init__
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[GpugeekError], args: tuple[Any, ...], state: dict[str, Any]) -> GpugeekError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


@contextlib.contextmanager
def phrased_for(surface: Surface) -> Iterator[None]:
    """Errors raised inside are phrased for ``surface`` (``str()``); for adapters' entry points.

    >>> with phrased_for(Surface.PYTHON):                               # doctest: +SKIP
    ...     PoolSpec.create(count=0)
    """
    try:
        yield
    except GpugeekError as e:
        e.in_surface(surface)
        raise


class SpecError(GpugeekError, ValueError):
    """A pool, job or price specification is invalid (bad user input)."""

    http_status = 400


def check_keywords(given: Iterable[str], known: Collection[str], call: str) -> None:
    """A keyword ``call`` does not take (a typo, most often) is one ``SpecError`` naming it, the
    closest one it takes and all it takes, where Python's own ``TypeError`` names an inner function.

    >>> try:
    ...     check_keywords(["cuont"], ["count", "name"], "launch()")
    ... except SpecError as e:
    ...     print(e)
    launch() takes no keyword 'cuont'; did you mean count=? (it takes count, name)
    """
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}=?" if close else ""
            raise SpecError(
                Phrase(f"{call} takes no keyword {{value}}{hint} (it takes {{rule}})"),
                field=name,
                value=name,
                rule=", ".join(sorted(known)),
            )


class NotFoundError(GpugeekError, LookupError):
    """A pool or job name/id that the registry does not know."""

    http_status = 404


class NotAllowedError(GpugeekError, PermissionError):
    """The caller may not see or change this (another user's team spend, for one)."""

    http_status = 403


class RegistryFolderOpenError(GpugeekError, PermissionError):
    """The registry's own folder is this user's and open to other users: refused, not changed, so
    that nobody's folder is chmod-ed behind their back; the message gives the ``chmod`` that fixes it.

    >>> print(RegistryFolderOpenError.of(Path("/srv/state"), 0o755))
    the registry's folder /srv/state is mode 0o755, open to other users: run `chmod 700 /srv/state`, or set GPUGEEK_REGISTRY to a file in a private folder
    """

    http_status = 503

    @classmethod
    def of(cls, folder: Path, mode: int) -> RegistryFolderOpenError:
        return cls(
            f"the registry's folder {folder} is mode {oct(mode)}, open to other users: run "
            f"`chmod 700 {shlex.quote(str(folder))}`, or set GPUGEEK_REGISTRY to a file in a private folder"
        )


class ConflictError(GpugeekError):
    """The request clashes with existing state (e.g. a pool name already in use)."""

    http_status = 409

    @classmethod
    def pool_name_taken(cls, name: str) -> ConflictError:
        """A live pool already has ``name``: how to stop it, in the syntax of each surface.

        >>> ConflictError.pool_name_taken("dev").phrase(Surface.MAGIC)
        "a pool named 'dev' is already running (stop it with %gpugeek_stop dev, or pick another --name)"
        """
        stop = PerSurface(
            core="stop it first",
            python="stop it with pool.stop()",
            magic=f"stop it with %gpugeek_stop {shlex.quote(name)}",
            server=Phrase("stop it with DELETE /gpugeek/pools/{name}", name=name),
        )
        return cls(
            Phrase("a pool named {value} is already running ({stop}, or pick another {field})", stop=stop),
            field="name",
            value=name,
            rule="a name no live pool has",
        )


class PoolBusyError(ConflictError):
    """A job that asked not to wait found its pool running another job."""


class BackendUnavailableError(GpugeekError):
    """The backend cannot provide what was asked (no such GPU here, no kubeconfig, ...)."""

    http_status = 422


class PoolStartError(GpugeekError):
    """A pool was asked for correctly but failed to come up."""

    http_status = 502


class JobFailedError(GpugeekError):
    """A distributed job ended with a failure on at least one rank."""

    http_status = 500


class JobTimeoutError(JobFailedError):
    """A job ran past its timeout."""


class JobInterruptedError(JobFailedError):
    """The user interrupted a running job."""


class BudgetExceededError(GpugeekError):
    """A pool spent its whole budget and was stopped."""

    http_status = 402


class QuotaExceededError(GpugeekError):
    """A launch would break the user's quota or the team's budget (GpugeekConfig.quota_*,
    team_budget_usd_per_month); nothing was started."""

    http_status = 403
