"""File paths written as tables in SQL text: ``SELECT ... FROM 'data/*.parquet'``.

:func:`path_tables` finds each single-quoted string that follows ``FROM`` or ``JOIN``,
or a comma in a ``FROM`` list (outside other strings, quoted identifiers and comments),
and rewrites it as a quoted
identifier named by the path, so the query plans over a table of that name and
DataFusion's messages name the path the user wrote.
"""

from __future__ import annotations

__all__ = ["path_tables", "quote_identifier"]

_TABLE_KEYWORDS = ("from", "join")
# words that end a FROM list (after them a comma separates values, not tables)
_CLAUSE_ENDS = frozenset({
    "where", "group", "order", "limit", "having", "on", "using", "select", "union",
    "intersect", "except", "window", "qualify", "offset", "fetch", "values", "set", "into",
    "returning",
})  # fmt: skip


def quote_identifier(name: str) -> str:
    """``name`` as a SQL quoted identifier."""
    return '"' + name.replace('"', '""') + '"'


def path_tables(query: str) -> tuple[str, list[str]]:
    """The query with path tables as quoted identifiers, and the paths in order (once each).

    Example:
        >>> path_tables("SELECT * FROM 'a/*.parquet' WHERE k = 'x'")
        ('SELECT * FROM "a/*.parquet" WHERE k = \\'x\\'', ['a/*.parquet'])
    """
    out: list[str] = []
    paths: list[str] = []
    last_word = ""
    in_from = False
    outer: list[bool] = []  # in_from of each enclosing parenthesis (subqueries)
    i, n = 0, len(query)
    while i < n:
        ch = query[i]
        if ch == "'":
            end = _string_end(query, i)
            text = query[i + 1 : end - 1].replace("''", "'")
            if text and (last_word in _TABLE_KEYWORDS or (in_from and last_word == ",")):
                out.append(quote_identifier(text))
                if text not in paths:
                    paths.append(text)
            else:
                out.append(query[i:end])
            last_word, i = "'", end
        elif ch == '"':
            end = query.find('"', i + 1)
            while end != -1 and query[end + 1 : end + 2] == '"':
                end = query.find('"', end + 2)
            end = n if end == -1 else end + 1
            out.append(query[i:end])
            last_word, i = '"', end
        elif query.startswith("--", i):
            end = query.find("\n", i)
            end = n if end == -1 else end
            out.append(query[i:end])
            i = end
        elif query.startswith("/*", i):
            end = query.find("*/", i + 2)
            end = n if end == -1 else end + 2
            out.append(query[i:end])
            i = end
        elif ch.isalnum() or ch == "_":
            start = i
            while i < n and (query[i].isalnum() or query[i] == "_"):
                i += 1
            last_word = query[start:i].lower()
            in_from = last_word in _TABLE_KEYWORDS or (in_from and last_word not in _CLAUSE_ENDS)
            out.append(query[start:i])
        else:
            if ch == "(":
                outer.append(in_from)
                in_from = False
            elif ch == ")":
                in_from = outer.pop() if outer else False
            if not ch.isspace():
                last_word = ch
            out.append(ch)
            i += 1
    return "".join(out), paths


def _string_end(query: str, start: int) -> int:
    """The index after the single-quoted string starting at ``start`` (``''`` escapes)."""
    i = start + 1
    while i < len(query):
        if query[i] == "'":
            if query[i + 1 : i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    return len(query)
