"""A task's distribution policy: its route and limits, checked once at definition, and the
fields they give each run (:meth:`TaskPolicy.fields`).

Keys (``route_key``, ``concurrency_key``, ``rate_key``) are an argument's name, checked against
the task's signature, or a callable given the call's ``(*args, **kwargs)`` that returns the key
(a ``str`` or an ``int``). Limit keys are built here, with the namespace and the task, so one
task's limit never counts another's runs: ``"{namespace}:{task}"`` for a task-wide limit,
``"{namespace}:{task}:{key}"`` per key.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .distribution.limits import Rate, parse_rate
from .distribution.routing import Strategy, check_failover, check_labels, check_route
from .errors import InvalidArgumentError
from .model import FanOut, FanOutKind
from .validation import KEY_LENGTH, check_text, shorten

KeySpec = str | Callable[..., object]
"""How a key is taken from a call: an argument's name, or a callable given the call."""
CONCURRENCY_LIMIT = 1_000_000
"""The largest ``concurrency`` a task may give."""
SHARDS_LIMIT = 10_000
"""The most children one shards fan-out may have."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Routing:
    """Which worker runs a task's runs (see :mod:`cronbus.distribution.routing`)."""

    route: Strategy = Strategy.ANY
    route_key: KeySpec | None = None
    labels: tuple[str, ...] = ()
    failover: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """How many of a task's runs may run at once, and start per period."""

    concurrency: int | None = None
    concurrency_key: KeySpec | None = None
    rate: Rate | None = None
    rate_key: KeySpec | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskPolicy:
    """A task's routing and limits, resolved against its signature."""

    task: str
    signature: inspect.Signature | None
    routing: Routing = Routing()
    limits: Limits = Limits()

    @property
    def per_call(self) -> bool:
        """Whether runs of the task may differ in their policy fields (a key taken per call)."""
        routing, limits = self.routing, self.limits
        keyed = routing.route is Strategy.HASH and routing.route_key is not None
        return keyed or limits.concurrency_key is not None or limits.rate_key is not None

    def with_routing(
        self,
        *,
        route: object = None,
        route_key: object = None,
        labels: Sequence[str] | None = None,
        failover: Sequence[str] | None = None,
    ) -> TaskPolicy:
        """This policy with the routing options given (not None) replacing the task's;
        refuses a bad option with :class:`~cronbus.errors.InvalidArgumentError`."""
        if route is None and route_key is None and labels is None and failover is None:
            return self
        old = self.routing
        routing = check_routing(
            self.signature,
            route=old.route if route is None else route,
            route_key=old.route_key if route_key is None else route_key,
            labels=old.labels if labels is None else labels,
            failover=old.failover if failover is None else failover,
            keep_key=route_key is None,
        )
        return dataclasses.replace(self, routing=routing)

    def fields(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], namespace: str
    ) -> dict[str, Any]:
        """The :class:`~cronbus.model.NewRun` fields of one call: route, route_key,
        route_labels, route_order, limit_key/limit_max, rate_key/rate_max/rate_period."""
        routing, limits = self.routing, self.limits
        fields: dict[str, Any] = {
            "route": routing.route.value,
            "route_labels": routing.labels,
            "route_order": routing.failover,
        }
        if routing.route is Strategy.HASH and routing.route_key is not None:
            fields["route_key"] = self._key(routing.route_key, args, kwargs, "route_key")
        base = f"{namespace}:{self.task}"
        if limits.concurrency is not None or limits.concurrency_key is not None:
            if limits.concurrency_key is None:
                fields["limit_key"] = base
            else:
                key = self._key(limits.concurrency_key, args, kwargs, "concurrency_key")
                fields["limit_key"] = f"{base}:{key}"
            fields["limit_max"] = limits.concurrency or 1
        if limits.rate is not None:
            if limits.rate_key is None:
                fields["rate_key"] = base
            else:
                fields["rate_key"] = (
                    f"{base}:{self._key(limits.rate_key, args, kwargs, 'rate_key')}"
                )
            fields["rate_max"] = limits.rate.max
            fields["rate_period"] = limits.rate.period
        return fields

    def _key(
        self, spec: KeySpec, args: Sequence[Any], kwargs: Mapping[str, Any], field: str
    ) -> str:
        return key_of(spec, self.signature, args, kwargs, field=field, task=self.task)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Redaction:
    """Which of a task's payloads the services hide from every reader (the ``redact`` option):
    shown as ``"[redacted]"`` by the API, the CLI and the console; the worker still gets them."""

    everything: bool = False
    """Every argument and the result (``redact=True``)."""
    names: frozenset[str] = frozenset()
    """Arguments hidden by name, passed by keyword."""
    positions: frozenset[int] = frozenset()
    """The same arguments passed by position: the places of the named parameters."""

    @property
    def hides_any(self) -> bool:
        """True when something is hidden."""
        return self.everything or bool(self.names)

    def hides(self, key: str) -> bool:
        """Whether the argument ``key`` is hidden: a name, or a position in digits."""
        if self.everything:
            return True
        if key.isascii() and key.isdigit():
            return int(key) in self.positions
        return key in self.names


NO_REDACTION = Redaction()
"""Nothing hidden (the default)."""


def check_redact(value: object, signature: inspect.Signature | None) -> Redaction:
    """The ``redact`` option: ``True`` (every argument and the result), or argument names
    (``("password", "card")``), each a parameter of the function (any name when it takes
    ``**kwargs``). ``False`` or ``()`` hide nothing."""
    if value is True:
        return Redaction(everything=True)
    if value is None or value is False:
        return NO_REDACTION
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | frozenset | set):
        raise InvalidArgumentError(
            "redact must be True (every argument and the result) or a list of argument names "
            f"like redact=('password',), got {shorten(value)}",
            field="redact",
        )
    params = list(signature.parameters.values()) if signature is not None else []
    open_ended = signature is None or any(p.kind is p.VAR_KEYWORD for p in params)
    names: set[str] = set()
    positions: set[int] = set()
    for name in value:
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(
                f"redact names arguments, got {shorten(name)}; give argument names as text",
                field="redact",
            )
        found = next((i for i, p in enumerate(params) if p.name == name), None)
        param = None if found is None else params[found]
        if param is not None and param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidArgumentError(
                f"redact={name!r} names the *{name} parameter; name the arguments it takes, or "
                "give redact=True to hide every argument",
                field="redact",
            )
        if param is None and not open_ended:
            named = [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            raise InvalidArgumentError(
                f"redact={name!r} names no argument of the function (its arguments: "
                f"{', '.join(named) or 'none'})",
                field="redact",
            )
        names.add(name)
        if param is not None and param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            assert found is not None
            positions.add(found)
    return Redaction(names=frozenset(names), positions=frozenset(positions))


def make_policy(
    task: str,
    signature: inspect.Signature | None,
    *,
    route: object = "any",
    route_key: object = None,
    labels: Sequence[str] | None = None,
    failover: Sequence[str] | None = None,
    concurrency: object = None,
    concurrency_key: object = None,
    rate: object = None,
    rate_key: object = None,
) -> TaskPolicy:
    """A task's policy from its options, or :class:`~cronbus.errors.InvalidArgumentError`
    naming the option at fault (the task turns it into a configuration error)."""
    routing = check_routing(
        signature, route=route, route_key=route_key, labels=labels, failover=failover
    )
    limits = check_limits(
        signature,
        concurrency=concurrency,
        concurrency_key=concurrency_key,
        rate=rate,
        rate_key=rate_key,
    )
    return TaskPolicy(task=task, signature=signature, routing=routing, limits=limits)


def check_routing(
    signature: inspect.Signature | None,
    *,
    route: object,
    route_key: object,
    labels: Sequence[str] | None,
    failover: Sequence[str] | None,
    keep_key: bool = False,
) -> Routing:
    """Validate routing options. ``keep_key``: a key inherited from the task is dropped, not
    refused, when the route is not ``hash`` (a ``using(route=...)`` that moves off hashing)."""
    strategy = check_route(route, route_key=route_key, labels=labels, failover=failover)
    if route_key is not None and strategy is not Strategy.HASH:
        if not keep_key:
            raise InvalidArgumentError(
                f"route_key is used by route='hash' only, and the route is {strategy.value!r}",
                field="route_key",
            )
        route_key = None
    return Routing(
        route=strategy,
        route_key=check_key_spec(route_key, signature, "route_key"),
        labels=check_labels(labels),
        failover=check_failover(failover),
    )


def check_limits(
    signature: inspect.Signature | None,
    *,
    concurrency: object,
    concurrency_key: object,
    rate: object,
    rate_key: object,
) -> Limits:
    """Validate the limit options: ``concurrency`` 1 to 1,000,000; ``rate`` as
    :func:`~cronbus.distribution.limits.parse_rate` reads it; a ``rate_key`` needs a rate."""
    count: int | None = None
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise InvalidArgumentError(
                f"concurrency must be a whole number, got {shorten(concurrency)}",
                field="concurrency",
            )
        if not 1 <= concurrency <= CONCURRENCY_LIMIT:
            raise InvalidArgumentError(
                f"concurrency must be between 1 and {CONCURRENCY_LIMIT:,}, got {concurrency}",
                field="concurrency",
            )
        count = concurrency
    parsed: Rate | None = None
    if rate is not None:
        if not isinstance(rate, str):
            raise InvalidArgumentError(
                f"rate must be text like '100/m', got {shorten(rate)}", field="rate"
            )
        parsed = parse_rate(rate, "rate")
    if rate_key is not None and parsed is None:
        raise InvalidArgumentError("rate_key needs a rate= (like '100/m')", field="rate_key")
    return Limits(
        concurrency=count,
        concurrency_key=check_key_spec(concurrency_key, signature, "concurrency_key"),
        rate=parsed,
        rate_key=check_key_spec(rate_key, signature, "rate_key"),
    )


def check_key_spec(spec: object, signature: inspect.Signature | None, field: str) -> KeySpec | None:
    """A key option: None, a callable, or the name of one of the task's arguments."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str):
        raise InvalidArgumentError(
            f"{field} must be an argument's name or a callable that returns the key, got "
            f"{shorten(spec)}",
            field=field,
        )
    if signature is None:
        raise InvalidArgumentError(
            f"{field}={spec!r} cannot be checked: the function has no signature; give a "
            "callable that returns the key",
            field=field,
        )
    param = signature.parameters.get(spec)
    if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        named = [
            p.name
            for p in signature.parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        raise InvalidArgumentError(
            f"{field}={spec!r} names no argument of the function (its arguments: "
            f"{', '.join(named) or 'none'}); give an argument's name or a callable",
            field=field,
        )
    return spec


def key_of(
    spec: KeySpec,
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    field: str,
    task: str,
) -> str:
    """The key one call gives: the named argument's value (its default when not passed), or
    what the callable returns; a ``str`` or an ``int``, else InvalidArgumentError."""
    if isinstance(spec, str):
        value, source = _argument(spec, signature, args, kwargs, field, task), f"argument {spec!r}"
    else:
        try:
            value = spec(*args, **kwargs)
        except Exception as exc:  # a user's callable: say which option failed, on which task
            raise InvalidArgumentError(
                f"task {task!r}: the {field} callable raised {type(exc).__name__}: "
                f"{shorten(str(exc), 200)}",
                field=field,
            ) from exc
        source = f"the {field} callable"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"task {task!r}: {field} must be a str or an int, but {source} gave {shorten(value)}",
            field=field,
        )
    key: str = check_text(value, f"task {task!r}: {field}", max_length=KEY_LENGTH)
    return key


def _argument(
    name: str,
    signature: inspect.Signature | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    field: str,
    task: str,
) -> Any:
    assert signature is not None  # check_key_spec refuses a name without a signature
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(
            f"task {task!r} cannot take these arguments: {shorten(str(exc), 200)}", field=field
        ) from None
    bound.apply_defaults()
    return bound.arguments.get(name)


def check_fanout(broadcast: object = None, shards: object = None) -> FanOut | None:
    """A defer's fan-out: ``broadcast=True`` (every live worker that knows the task),
    ``broadcast=[labels]`` (those carrying them), or ``shards=N`` (1 to 10,000); not both."""
    spread: FanOut | None = None
    if broadcast is True:
        spread = FanOut(kind=FanOutKind.BROADCAST)
    elif broadcast is not None and broadcast is not False:
        if isinstance(broadcast, str | bytes) or not isinstance(broadcast, Sequence):
            raise InvalidArgumentError(
                f"broadcast must be True or a list of labels, got {shorten(broadcast)}",
                field="broadcast",
            )
        if not broadcast:
            raise InvalidArgumentError(
                "broadcast=[] names no label; give broadcast=True for every worker",
                field="broadcast",
            )
        labels = check_labels(list(broadcast), "broadcast")
        spread = FanOut(kind=FanOutKind.BROADCAST, labels=labels)
    if shards is None:
        return spread
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= SHARDS_LIMIT:
        raise InvalidArgumentError(
            f"shards must be a whole number from 1 to {SHARDS_LIMIT:,}, got {shorten(shards)}",
            field="shards",
        )
    if spread is not None:
        raise InvalidArgumentError(
            "give broadcast or shards, not both: a run fans out one way", field="shards"
        )
    return FanOut(kind=FanOutKind.SHARDS, shards=shards)
