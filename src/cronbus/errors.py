"""The exceptions cronbus raises, under one root.

::

    CronbusError
    ├── NotFoundError             the thing named does not exist            (HTTP 404, CLI exit 1)
    │   ├── RunNotFoundError          no run has that id
    │   ├── JobNotFoundError          no job has that name
    │   ├── SubscriptionNotFoundError no subscription has that name
    │   ├── DeliveryNotFoundError     no delivery has that id
    │   └── UnknownTaskError          no task of that name is registered
    ├── ConflictError             the change clashes with what is stored     (HTTP 409)
    │   ├── JobExistsError            a job of that name exists already
    │   ├── CodeJobError              a job defined in code is changed without force
    │   ├── SubscriptionExistsError   another subscription of that name exists already
    │   └── InvalidTransitionError    a state change the run state machine forbids
    ├── InvalidArgumentError      an input is out of range or of the wrong kind (HTTP 422)
    │   └── SerializationError        an argument or result is not JSON
    ├── UnauthorizedError         no credentials, or credentials not valid     (HTTP 401)
    ├── ForbiddenError            the caller may not do this, or not here      (HTTP 403)
    ├── RateLimitedError          the caller sent too many requests           (HTTP 429)
    ├── ConfigurationError        a setting, URL or option is wrong
    │   └── StoreURLError         a store URL cannot be understood
    ├── StoreError                the store failed or holds an unexpected schema
    │   └── SchemaError           the store's schema is not the version this cronbus needs
    ├── RunTimeoutError           ``RunHandle.wait`` gave up before the run ended
    ├── RunFailedError            a run ended without success (raised by ``testing``)
    └── WebhookVerificationError  a received webhook's signature or timestamp is not valid

The first five branches are the service layer's answers: every front end (Python API, CLI,
HTTP API, console) maps them mechanically, so a rule refused at one door is refused the same way
at all of them.

Tasks may raise :class:`Abort` to fail without retries; it is not a ``CronbusError`` because it
belongs to user code, not to cronbus.
"""

from __future__ import annotations


class CronbusError(Exception):
    """Something went wrong in cronbus."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class NotFoundError(CronbusError, LookupError):
    """The run, job, subscription, delivery, task, token or other thing named does not exist."""


class ConflictError(CronbusError):
    """The change clashes with what is stored: a name taken, a state that forbids it."""


class InvalidArgumentError(CronbusError, ValueError):
    """An argument given to cronbus is out of range or of the wrong kind.

    ``field`` names the input at fault when one is known (``"queue"``, ``"data.id"``), so an
    HTTP answer can point at it."""

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class UnauthorizedError(CronbusError):
    """No credentials were given, or they are not valid (unknown, revoked or expired token)."""


class ForbiddenError(CronbusError, PermissionError):
    """The caller is known but may not do this: its scope is too low, or the namespace not its."""


class RateLimitedError(CronbusError):
    """The caller sent more requests than its rate allows; try again after ``retry_after``."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConfigurationError(CronbusError):
    """A setting, URL or option is wrong."""


class StoreURLError(ConfigurationError):
    """The store URL cannot be understood; use sqlite:///path.db or postgresql://..."""


class SerializationError(InvalidArgumentError, TypeError):
    """A value is not JSON; arguments and results must be JSON values."""


class UnknownTaskError(NotFoundError):
    """No task of that name is registered in the app."""


class RunNotFoundError(NotFoundError):
    """No run has that id."""


class JobNotFoundError(NotFoundError):
    """No job has that name."""


class JobExistsError(ConflictError, ValueError):
    """A job of that name exists already (``jobs.add``; change it with ``jobs.update``)."""


class CodeJobError(ConflictError):
    """The job is defined in code: the next scheduler start restores it; pass force to change it
    anyway."""


class SubscriptionNotFoundError(NotFoundError):
    """No subscription has that name."""


class SubscriptionExistsError(ConflictError, ValueError):
    """Another subscription of that name exists already (``subscriptions.add``; change it with
    ``subscriptions.update``, or add it with ``replace_existing=True``)."""


class DeliveryNotFoundError(NotFoundError):
    """No delivery has that id."""


class WorkerNotFoundError(NotFoundError):
    """No registered worker has that id."""


class InvalidTransitionError(ConflictError):
    """The run state machine forbids this change of state."""


class LeaseLostError(ConflictError):
    """The attempt no longer holds its run (its lease was reaped, or the run was cancelled):
    what it asked (creating children with ``ctx.map``) was not done."""


class StoreError(CronbusError):
    """The store failed or holds a schema this version does not know."""


class SchemaError(StoreError):
    """The store's schema is not the version this cronbus needs; run `cronbus migrate`."""


class RunTimeoutError(CronbusError, TimeoutError):
    """The run did not end before the wait timed out."""


class RunFailedError(CronbusError):
    """The run ended without success."""


class Abort(Exception):
    """Raise from a task to fail its run at once, without retries (it becomes dead)."""


class WebhookVerificationError(CronbusError):
    """The webhook is refused: a header is missing, it is too old, or no signature matches."""


class ConnectorNotFoundError(NotFoundError):
    """No connector has that name."""


class ConnectorExistsError(ConflictError, ValueError):
    """A connector of that name exists with another kind or config (creating a connector with
    the same name, kind and config again is a no-op)."""


class ConnectorConfigError(InvalidArgumentError):
    """A connector's config is invalid: the message names the field and why."""


class ConnectorNotAllowedError(ConnectorConfigError):
    """A connector's file or database is not one the operator allows connectors to touch
    (``CRONBUS_CONNECTOR_FILES``, ``CRONBUS_CONNECTOR_DATABASES``), or is the store itself."""
