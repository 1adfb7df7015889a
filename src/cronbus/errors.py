"""The exceptions cronbus raises, under one root.

::

    CronbusError
    ├── ConfigurationError        a setting, URL or option is wrong
    │   └── StoreURLError         a store URL cannot be understood
    ├── SerializationError        an argument or result is not JSON
    ├── InvalidArgumentError      an option or argument is out of range or of the wrong kind
    ├── UnknownTaskError          no task of that name is registered
    ├── RunNotFoundError          no run has that id
    ├── JobNotFoundError          no job has that name
    ├── JobExistsError            a job of that name exists already
    ├── CodeJobError              a job defined in code is changed without force
    ├── SubscriptionNotFoundError no subscription has that name
    ├── SubscriptionExistsError   another subscription of that name exists already
    ├── DeliveryNotFoundError     no delivery has that id
    ├── InvalidTransitionError    a state change the run state machine forbids
    ├── StoreError                the store failed or holds an unexpected schema
    │   └── SchemaError           the store's schema is not the version this cronbus needs
    ├── RunTimeoutError           ``RunHandle.wait`` gave up before the run ended
    ├── RunFailedError            a run ended without success (raised by ``testing``)
    └── WebhookVerificationError  a received webhook's signature or timestamp is not valid

Tasks may raise :class:`Abort` to fail without retries; it is not a ``CronbusError`` because it
belongs to user code, not to cronbus.
"""

from __future__ import annotations


class CronbusError(Exception):
    """Something went wrong in cronbus."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class ConfigurationError(CronbusError):
    """A setting, URL or option is wrong."""


class StoreURLError(ConfigurationError):
    """The store URL cannot be understood; use sqlite:///path.db or postgresql://..."""


class SerializationError(CronbusError, TypeError):
    """A value is not JSON; arguments and results must be JSON values."""


class UnknownTaskError(CronbusError, LookupError):
    """No task of that name is registered in the app."""


class RunNotFoundError(CronbusError, LookupError):
    """No run has that id."""


class JobNotFoundError(CronbusError, LookupError):
    """No job has that name."""


class JobExistsError(CronbusError, ValueError):
    """A job of that name exists already (``jobs.add``; change it with ``jobs.update``)."""


class CodeJobError(CronbusError):
    """The job is defined in code: the next scheduler start restores it; pass force to change it
    anyway."""


class SubscriptionNotFoundError(CronbusError, LookupError):
    """No subscription has that name."""


class SubscriptionExistsError(CronbusError, ValueError):
    """Another subscription of that name exists already (``subscriptions.add``; change it with
    ``subscriptions.update``, or add it with ``replace_existing=True``)."""


class DeliveryNotFoundError(CronbusError, LookupError):
    """No delivery has that id."""


class InvalidTransitionError(CronbusError):
    """The run state machine forbids this change of state."""


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


class InvalidArgumentError(CronbusError, ValueError):
    """An argument given to cronbus is out of range or of the wrong kind."""


class WebhookVerificationError(CronbusError):
    """The webhook is refused: a header is missing, it is too old, or no signature matches."""
