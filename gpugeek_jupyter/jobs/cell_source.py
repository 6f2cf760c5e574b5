"""How a cell's source reads, by IPython's rules: whether its last line gives a value to show.

A cell that ends with an expression shows its value, unless the line ends with ``;`` (IPython's
way to keep a value out of sight: ``net.train();``). On a pool that also means the value is never
sent back from the ranks. Pure functions: the notebook side and the ranks both use them.

>>> shows_value("x = 1\\nx + 1"), shows_value("x + 1;  # quiet"), shows_value("x = 1")
(True, False, False)
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize

_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT}


def ends_with_semicolon(source: str) -> bool:
    """Whether the cell's last meaningful token is ``;`` (comments and blank lines after it aside)."""
    last = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type not in _SKIPPED:
                last = token
    except (tokenize.TokenError, SyntaxError):
        return False
    return last is not None and last.type == tokenize.OP and last.string == ";"


@functools.lru_cache(maxsize=64)
def shows_value(source: str) -> bool:
    """Whether the cell ends with an expression whose value IPython would show (cached: cells
    are run again as they are)."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and isinstance(body[-1], ast.Expr) and not ends_with_semicolon(source)
