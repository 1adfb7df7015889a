"""Traces with OpenTelemetry (the optional ``otel`` extra): from ``defer`` through each attempt,
and one span per delivery of an event.

What is traced:

- **defer**: the caller's current span context is written with the run, as a W3C
  ``traceparent``/``tracestate`` carrier (:func:`capture`; NULL when there is none, so a run
  deferred without tracing costs nothing in its row);
- **attempts**: each attempt is a span (:func:`attempt`) whose parent is that stored context, so
  a web request's trace continues into its task; it is the current span while the task runs
  (async and thread tasks), so the task's own spans nest under it;
- **deliveries**: each push of a delivery is a span (:func:`delivery`), the child of the
  publisher's context when one was captured at publish (:func:`capture` again, stored with the
  event), else a new root; webhooks get its ``traceparent`` as an HTTP header (:func:`inject`).

Spans go to whatever tracer provider the process set up (``opentelemetry.trace
.set_tracer_provider``, or the ``opentelemetry-instrument`` launcher); with the API alone they
are not recorded, but a caller's context is still carried on.

Without the extra, every hook is a no-op: OpenTelemetry is imported once, the first time a hook
asks (so a command that never defers or runs a task never pays the import), and the answer is
kept in :data:`ENABLED`; no hook tries an import per run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Self, TypeVar

if TYPE_CHECKING:
    from ..events.records import Delivery
    from ..model import ClaimedRun, Outcome

__all__ = [
    "ENABLED",
    "AttemptSpan",
    "DeliverySpan",
    "attempt",
    "capture",
    "carry",
    "delivery",
    "enabled",
    "inject",
    "remote_parent",
]

T = TypeVar("T")

ENABLED: bool | None = None
"""Whether OpenTelemetry is importable: None until a hook first asks, then fixed (tests may set
it to False to take the path of a process without the extra)."""

TRACER_NAME = "cronbus"
_otel: Any = None
"""The loaded pieces (:class:`_Otel`), once :data:`ENABLED` is True."""


class _Otel:
    """The OpenTelemetry API objects the hooks use, imported once."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        from .._version import __version__

        self.context = context
        self.trace = trace
        # W3C Trace Context explicitly, not the global propagator: the stored column and the
        # header are documented as traceparent/tracestate whatever else a process propagates.
        self.propagator = TraceContextTextMapPropagator()
        # A ProxyTracer until a provider is set; it follows the provider set later.
        self.tracer = trace.get_tracer(TRACER_NAME, __version__)
        self.kinds = trace.SpanKind
        self.silent = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def enabled() -> bool:
    """Whether traces can be made in this process (the extra is installed); decided once."""
    global ENABLED, _otel
    if ENABLED is None:
        try:
            _otel = _Otel()
        except ImportError:
            ENABLED = False
        else:
            ENABLED = True
    return ENABLED


def _recording() -> bool:
    """Whether a tracer provider is set (spans are recorded): without one, the attempt and
    delivery hooks skip making spans nobody keeps."""
    return not isinstance(_otel.trace.get_tracer_provider(), _otel.silent)


# -- carrying a context ------------------------------------------------------------------------
def capture() -> str | None:
    """The current span context as stored text (a JSON W3C carrier), or None when there is no
    valid current span (or no extra): what ``defer`` and ``publish`` keep with what they make."""
    if not enabled():
        return None
    span = _otel.trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _otel.propagator.inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


def _parent(stored: str | None) -> Any:
    """The OpenTelemetry context a stored carrier names (None: a new root)."""
    if stored is None:
        return None
    try:
        carrier = json.loads(stored)
    except ValueError:
        return None  # written by hand or truncated: start a new trace rather than fail the run
    if not isinstance(carrier, Mapping):
        return None
    return _otel.propagator.extract({str(k): str(v) for k, v in carrier.items()})


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``) to outgoing HTTP headers."""
    if enabled():
        _otel.propagator.inject(headers)


@contextmanager
def remote_parent(traceparent: str | None, tracestate: str | None = None) -> Iterator[None]:
    """Make a caller's ``traceparent`` header the current context for the block (the HTTP
    API's defer), unless a span is current already (an instrumented server made one from the
    same header)."""
    if traceparent is None or not enabled() or _otel.trace.get_current_span().is_recording():
        yield
        return
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    token = _otel.context.attach(_otel.propagator.extract(carrier))
    try:
        yield
    finally:
        _otel.context.detach(token)


def carry(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` bound to the current context, to run in another thread (a thread task sees its
    attempt's span as current); ``fn`` itself without the extra."""
    if not enabled() or not _recording():
        return fn
    ctx = _otel.context.get_current()

    def bound() -> T:
        token = _otel.context.attach(ctx)
        try:
            return fn()
        finally:
            _otel.context.detach(token)

    return functools.update_wrapper(bound, fn)


# -- attempts ------------------------------------------------------------------------------------
class _Scope:
    """A span made current for a block and ended after it; a shared no-op without a span.

    A class, not a generator context manager: the no-op path of every attempt and push stays
    one attribute test (a generator costs a frame and several calls each time)."""

    __slots__ = ("_use", "span")

    def __init__(self, span: Any = None) -> None:
        self.span = span
        self._use: Any = None if span is None else _otel.trace.use_span(span, end_on_exit=True)

    def __enter__(self) -> Self:
        if self._use is not None:
            self._use.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._use is not None:
            # use_span records an escaping exception (a worker bug: the executor turns the
            # task's exceptions into outcomes) and ends the span.
            self._use.__exit__(*exc)


class AttemptSpan(_Scope):
    """The span of one attempt (a context manager); :meth:`ended` records how it ended."""

    __slots__ = ()

    def ended(self, outcome: Outcome | None) -> None:
        """Record the attempt's outcome (None: the lease was lost, the outcome is not ours)."""
        if self.span is None:
            return
        if outcome is None:
            self.span.set_attribute("cronbus.run.outcome", "lost")
            self.span.set_status(_otel.trace.Status(_otel.trace.StatusCode.ERROR, "lease lost"))
            return
        self.span.set_attribute("cronbus.run.outcome", outcome.outcome.value)
        if outcome.retry_at is not None:
            self.span.set_attribute("cronbus.run.retry_at", outcome.retry_at)
        error = outcome.error
        if error is None:
            return
        # The exception itself may live in another thread or process; its recorded form is
        # what every isolation mode gives, written as record_exception writes one.
        self.span.add_event(
            "exception",
            {
                "exception.type": error.type,
                "exception.message": error.message,
                "exception.stacktrace": error.traceback or "",
            },
        )
        status = _otel.trace.Status(_otel.trace.StatusCode.ERROR, f"{error.type}: {error.message}")
        self.span.set_status(status)


_NO_ATTEMPT = AttemptSpan()


def attempt(claimed: ClaimedRun) -> AttemptSpan:
    """The span of one attempt, current for the ``with`` block: a child of the context stored
    at defer (``claimed.trace``), or a new root."""
    if not enabled() or not _recording():
        return _NO_ATTEMPT
    attributes = {
        "messaging.system": "cronbus",
        "messaging.operation.type": "process",
        "messaging.destination.name": claimed.queue,
        "cronbus.run.id": claimed.run_id,
        "cronbus.run.attempt": claimed.number,
        "cronbus.run.attempt_id": claimed.attempt_id,
        "cronbus.task": claimed.task,
        "cronbus.queue": claimed.queue,
    }
    span = _otel.tracer.start_span(
        f"run {claimed.task}",
        context=_parent(claimed.trace),
        kind=_otel.kinds.CONSUMER,
        attributes=attributes,
    )
    return AttemptSpan(span)


# -- deliveries ----------------------------------------------------------------------------------
class DeliverySpan(_Scope):
    """The span of one push of a delivery (a context manager); :meth:`ended` records the
    answer."""

    __slots__ = ()

    def ended(self, ok: bool, status: int | None, error: str | None) -> None:
        """Record the push's answer: acknowledged or not, the HTTP status, the error."""
        if self.span is None:
            return
        self.span.set_attribute("cronbus.delivery.acked", ok)
        if status is not None:
            self.span.set_attribute("http.response.status_code", status)
        if not ok:
            self.span.set_status(
                _otel.trace.Status(_otel.trace.StatusCode.ERROR, error or "not acknowledged")
            )


_NO_DELIVERY = DeliverySpan()


def delivery(
    subscription: str, target: str, item: Delivery, published: str | None = None
) -> DeliverySpan:
    """The span of one push, current for the ``with`` block: a child of the publisher's
    context (``published``, as :func:`capture` stored it), or a new root."""
    if not enabled() or not _recording():
        return _NO_DELIVERY
    attributes = {
        "messaging.system": "cronbus",
        "messaging.operation.type": "send",
        "messaging.destination.name": subscription,
        "cronbus.subscription": subscription,
        "cronbus.target": target,
        "cronbus.delivery.id": item.id,
        "cronbus.delivery.attempt": item.attempts + 1,
        "cronbus.event.id": item.event_id,
    }
    span = _otel.tracer.start_span(
        f"deliver {subscription}",
        context=_parent(published),
        kind=_otel.kinds.PRODUCER,
        attributes=attributes,
    )
    return DeliverySpan(span)
