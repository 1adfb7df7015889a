"""The curated public surface: what `cronbus` exports, and that every public object says what
it is."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import cronbus

EXPECTED = {
    "Abort",
    "App",
    "Attempt",
    "AttemptOutcome",
    "Call",
    "CancelToken",
    "ConfigurationError",
    "CronbusError",
    "ErrorInfo",
    "Event",
    "Interrupted",
    "InvalidArgumentError",
    "InvalidTransitionError",
    "Retry",
    "Run",
    "RunContext",
    "RunFailedError",
    "RunHandle",
    "RunNotFoundError",
    "RunState",
    "RunTimeoutError",
    "SerializationError",
    "Settings",
    "StoreError",
    "StoreURLError",
    "Task",
    "UnknownTaskError",
    "Worker",
    "__version__",
    "current_token",
    "generate_secret",
    "make_event",
}


def test_all_is_the_curated_surface() -> None:
    assert set(cronbus.__all__) == EXPECTED
    assert list(cronbus.__all__) == sorted(cronbus.__all__)
    for name in cronbus.__all__:
        assert getattr(cronbus, name) is not None


def test_errors_share_one_root() -> None:
    for name in cronbus.__all__:
        obj = getattr(cronbus, name)
        # Abort and Interrupted are raised in user code, by it or at it: not cronbus errors.
        user_side = obj in (cronbus.Abort, cronbus.Interrupted)
        if inspect.isclass(obj) and issubclass(obj, Exception) and not user_side:
            assert issubclass(obj, cronbus.CronbusError), name


def _modules() -> list[str]:
    names = ["cronbus"]
    for info in pkgutil.walk_packages(cronbus.__path__, "cronbus."):
        names.append(info.name)
    return names


def test_every_public_object_has_a_docstring() -> None:
    missing = []
    for module_name in _modules():
        if module_name.endswith("__main__"):
            continue
        module = importlib.import_module(module_name)
        if not module.__doc__:
            missing.append(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                continue
            # pydantic files each parametrised generic (``PageOut[Run]``) in its module's
            # namespace under that name: not a name anyone can import.
            if not name.isidentifier():
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                if not obj.__doc__:
                    missing.append(f"{module_name}.{name}")
                if inspect.isclass(obj):
                    for attr, member in vars(obj).items():
                        if attr.startswith("_") or not inspect.isfunction(member):
                            continue
                        if not member.__doc__:
                            missing.append(f"{module_name}.{name}.{attr}")
    assert missing == []


# -- the docs' snippets --------------------------------------------------------------------------
_ROOT = Path(__file__).resolve().parents[2]
_DOCS = [_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _snippets() -> list[tuple[str, ast.Module]]:
    """Every ```python block of the README and docs/, parsed (top-level await allowed)."""
    found = []
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for path in _DOCS:
        for i, match in enumerate(_BLOCK.finditer(path.read_text())):
            where = f"{path.name} block {i + 1}"
            found.append((where, compile(match.group(1), where, "exec", flags=flags)))
    return found


def test_docs_have_python_snippets() -> None:
    assert len(_snippets()) >= 5  # the checks below are not vacuous


def test_every_import_in_the_docs_resolves() -> None:
    missing = []
    for where, tree in _snippets():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cronbus"):
                module = importlib.import_module(node.module or "")
                missing += [
                    f"{where}: {node.module}.{alias.name}"
                    for alias in node.names
                    if not hasattr(module, alias.name)
                ]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("cronbus"):
                        importlib.import_module(alias.name)
    assert missing == []


def test_docs_import_the_cronbus_names_they_use() -> None:
    """A snippet that uses ``make_event`` or ``Event`` imports it (in it or in an earlier block
    of the same page, read like one session), so the snippets run as written."""
    unbound = []
    bound: dict[str, set[str]] = {}
    for where, tree in _snippets():
        page = bound.setdefault(where.split(" block ")[0], set())
        page |= {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom | ast.Import)
            for alias in node.names
        }
        page |= {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        }
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        unbound += [f"{where}: {name}" for name in sorted(used - page) if name in cronbus.__all__]
    assert unbound == []
