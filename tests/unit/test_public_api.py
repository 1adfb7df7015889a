"""The curated public surface: what `cronbus` exports, and that every public object says what
it is."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

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
    "Interrupted",
    "InvalidArgumentError",
    "InvalidTransitionError",
    "Retry",
    "Run",
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
