"""A Griffe extension for ``make docs``: the package's docstrings as mkdocstrings renders them.

The docstrings are reST-flavoured prose, the style pydoc, IPython's ``?`` and doctest read: doctest
``>>>`` runs, ``Examples::`` literal blocks and ``:class:`X``` roles; mkdocstrings renders Markdown.
On the way in, ``>>>`` runs become fenced ``pycon`` blocks without their doctest flags, ``text::``
ends with one colon (its indented block stays a Markdown code block), and a role becomes a code span.

Configuration traits (``GpugeekConfig``) are documented by their ``help=``, as Jupyter's
``--help-all`` shows them; that text, the trait's type and its default become its docstring.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`~?\.?([^`]+)`")
_DOCTEST_FLAGS = re.compile(r"\s*#\s*doctest:\s*[+-]\w+(?:\s*,\s*[+-]\w+)*")
_LITERAL_MARKER = re.compile(r"(\S)::$")


def markdown_from_rest_prose(text: str) -> str:
    """``text`` with its doctest runs fenced, its ``::`` markers halved and its roles as code spans."""
    lines: list[str] = []
    indent = ""
    in_doctest = in_fence = False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("```") and not in_doctest:
            in_fence = not in_fence
        elif not in_fence and not in_doctest and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            lines += ([""] if lines and lines[-1].strip() else []) + [f"{indent}```pycon"]
            in_doctest = True
        elif in_doctest and not stripped:
            lines.append(f"{indent}```")
            in_doctest = False
        if in_doctest:
            lines.append(_DOCTEST_FLAGS.sub("", line))
        elif in_fence:
            lines.append(line)
        else:
            lines.append(_LITERAL_MARKER.sub(r"\1:", _ROLE.sub(r"`\1`", line)))
    if in_doctest:
        lines.append(f"{indent}```")
    return "\n".join(lines)


def trait_help(value: ast.expr | None) -> str | None:
    """The docstring of a traitlets trait (``Float(2.0, help="...").tag(config=True)``): its ``help=``,
    then its type and default; None when ``value`` is not a trait with help."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "tag":
        value = value.func.value
    if not isinstance(value, ast.Call):
        return None
    help_text = next(
        (k.value.value for k in value.keywords if k.arg == "help" and isinstance(k.value, ast.Constant)), None
    )
    if not isinstance(help_text, str):
        return None
    kind = ast.unparse(value.func)
    default = f", default `{ast.unparse(value.args[0])}`" if value.args else ""
    return f"{help_text}\n\nTrait: `{kind}`{default}."


class PackageDocstrings(griffe.Extension):
    """Gives traits their help as docstring, then rewrites every docstring once the package is loaded."""

    def on_attribute_instance(self, *, node: Any, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is None and isinstance(node, ast.Assign | ast.AnnAssign):
            help_text = trait_help(node.value)
            if help_text:
                attr.docstring = griffe.Docstring(help_text, parent=attr)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _rewrite(pkg)


def _rewrite(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        obj.docstring.value = markdown_from_rest_prose(obj.docstring.value)
    for member in obj.members.values():
        if not member.is_alias:
            _rewrite(member)  # type: ignore[arg-type]
