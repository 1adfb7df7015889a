"""The app's code rules: ``app.alerts.add(...)`` and ``@app.alert(...)``.

Code rules live in the app's code, not in the store, like the handlers of ``@app.subscribe``:
every process that may evaluate alerts (the one holding the ``alerts`` lease) must load the
same app. They belong to the app's namespace, and their names may not be taken by a stored
rule (``cronbus alerts add`` refuses them when it knows the app).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import ConfigurationError
from .build import build_rule
from .records import AlertRule, Destination, RuleKind

if TYPE_CHECKING:
    from ...app import App

C = TypeVar("C", bound=Callable[..., Any])


class AlertRegistry:
    """The rules an app's code defines (see the module's docstring)."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._rules: dict[str, AlertRule] = {}

    def __len__(self) -> int:
        return len(self._rules)

    def __iter__(self) -> Iterator[AlertRule]:
        return iter(self.rules())

    def rules(self) -> list[AlertRule]:
        """The code rules, in the app's (current) namespace, by name."""
        namespace = self._app.namespace
        return [replace(self._rules[n], namespace=namespace) for n in sorted(self._rules)]

    def get(self, name: str) -> AlertRule | None:
        """The code rule named ``name``, if any."""
        rule = self._rules.get(name)
        return None if rule is None else replace(rule, namespace=self._app.namespace)

    def add(
        self,
        kind: str | RuleKind,
        *,
        to: Sequence[Destination],
        name: str | None = None,
        repeat: float | str = 3600.0,
        **params: Any,
    ) -> AlertRule:
        """Watch a built-in condition (``kind``: ``job-failures``, ``dead-runs``,
        ``queue-depth``, ``queue-age``, ``scheduler-lag``, ``subscription-failing``,
        ``circuit-open``, ``worker-lost``, ``queue-unserved``) and tell ``to`` (made with
        :func:`~.build.webhook`, :func:`~.build.email`, :func:`~.build.chat`). ``params``
        are the kind's (``threshold``, ``count``, ``queue``, ``job``, ``task``,
        ``subscription``, ``worker``); ``repeat`` is the time between notices while it holds
        (seconds or ``15m``, ``1h``; 0: once)."""
        rule = build_rule(
            kind,
            name=name,
            to=to,
            repeat=repeat,
            namespace=self._app.namespace,
            source="code",
            **params,
        )
        return self._register(rule)

    def check(
        self,
        *,
        to: Sequence[Destination],
        name: str | None = None,
        repeat: float | str = 3600.0,
    ) -> Callable[[C], C]:
        """Decorate a check of your own, called at every evaluation with the namespace's
        :class:`~.rules.Figures` (sync or async): it returns None when all is well, a message
        (one alert), or a mapping of subject to message (one alert per subject)."""

        def register(function: C) -> C:
            if not callable(function):
                raise ConfigurationError(f"@app.alert needs a function, got {function!r}")
            chosen = name or f"{function.__module__}.{function.__qualname__}"
            rule = build_rule(
                RuleKind.CUSTOM,
                name=chosen.replace("<", "").replace(">", ""),
                to=to,
                repeat=repeat,
                namespace=self._app.namespace,
                source="code",
                check=function,
            )
            self._register(rule)
            return function

        return register

    def _register(self, rule: AlertRule) -> AlertRule:
        if rule.name in self._rules:
            raise ConfigurationError(f"two alert rules are named {rule.name!r}; give one a name=")
        self._rules[rule.name] = rule
        return rule
