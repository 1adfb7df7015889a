"""No code of the SQLite store opens the store's own files outside SQLite (issue 30).

On Linux, closing any descriptor of a file drops every POSIX lock the process holds on it, so
one ``open()`` + ``close()`` of ``x.db`` lets another process believe it is the last user and
unlink the live WAL. The only file the store opens itself is its writer lock, a file of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import cronbus

STORE = Path(cronbus.__file__).parent / "store"


def opens(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls of builtin ``open`` and ``os.open`` in ``tree``: (line, source of the first arg)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        builtin = isinstance(func, ast.Name) and func.id == "open"
        os_open = (
            isinstance(func, ast.Attribute)
            and func.attr == "open"
            and isinstance(func.value, ast.Name)
            and func.value.id == "os"
        )
        if builtin or os_open:
            found.append((node.lineno, ast.unparse(node.args[0])))
    return found


def test_the_store_opens_no_file_but_its_writer_lock() -> None:
    seen = {
        f"{path.relative_to(STORE)}:{line}": arg
        for path in sorted(STORE.rglob("*.py"))
        for line, arg in opens(ast.parse(path.read_text()))
    }
    assert list(seen.values()) == ["lock"], seen
