"""The service layer: the only door to the store for every front end.

The Python facades, the CLI and the HTTP API all reach the store through :class:`Services`:
each use case (list runs, retry a run, pause a job, publish events, requeue dead letters...)
is written once here, with its validation, its access check and its audit entry, and the front
ends only turn arguments into calls and records into output.

Every method is a coroutine; it checks the caller's :class:`~.access.Access` first (``read``
for reads, ``write`` for changes, ``admin`` for tokens and namespaces), validates its input
(errors are :class:`~cronbus.errors.InvalidArgumentError` naming the ``field``), acts in one
namespace (a resource of another namespace is not found, never forbidden, so its existence does
not leak), records an audit entry for every change, and returns records, never dicts.

::

    services = Services(app)                          # local: admin of every namespace
    services = Services(app, access, namespace="shop")
    page = await services.runs.list(RunQuery(states=[RunState.DEAD]), limit=20)
    await services.runs.retry(page.items[0].id)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..validation import check_namespace
from .access import LOCAL, Access, Scope
from .alerts import AlertsService
from .audit import AuditService
from .connectors import ConnectorsService, ConnectorView, TaskView
from .console_sessions import ConsoleSessionsService
from .context import Context
from .dead_letters import DeadLettersService
from .health import HealthService
from .jobs import JobsService
from .namespaces import NamespacesService
from .operations import OperationsService
from .overview import Overview, OverviewService, SchedulerLag
from .pages import Page
from .requests import RequestsService
from .runs import RunsService
from .stats import Bucket, StatsService
from .subscriptions import SubscriptionsService
from .tasks import TasksService
from .tokens import TokensService
from .topics import TopicsService
from .views import (
    DeadLetter,
    DeadLetterKind,
    DeadLetterResult,
    DeferResult,
    DeliveryDetail,
    EventInput,
    PurgeResult,
    ReplayResult,
    RequeueResult,
    RunDetail,
    RunQuery,
    SubscriptionInput,
    SubscriptionView,
    TaskInfo,
    WorkerView,
)
from .workers import WorkersService

if TYPE_CHECKING:
    from ..app import App

__all__ = [
    "LOCAL",
    "Access",
    "AuditService",
    "Bucket",
    "ConnectorView",
    "ConnectorsService",
    "ConsoleSessionsService",
    "DeadLetter",
    "DeadLetterKind",
    "DeadLetterResult",
    "DeadLettersService",
    "DeferResult",
    "DeliveryDetail",
    "EventInput",
    "HealthService",
    "JobsService",
    "NamespacesService",
    "OperationsService",
    "Overview",
    "OverviewService",
    "Page",
    "PurgeResult",
    "ReplayResult",
    "RequestsService",
    "RequeueResult",
    "RunDetail",
    "RunQuery",
    "RunsService",
    "SchedulerLag",
    "Scope",
    "Services",
    "StatsService",
    "SubscriptionInput",
    "SubscriptionView",
    "SubscriptionsService",
    "TaskInfo",
    "TaskView",
    "TasksService",
    "TokensService",
    "TopicsService",
    "WorkerView",
    "WorkersService",
]


class Services:
    """Every service, for one caller (``access``) in one namespace (the app's by default).

    The app must be open (``async with app:``) when a method is called.
    """

    def __init__(self, app: App, access: Access = LOCAL, namespace: str | None = None) -> None:
        chosen = namespace if namespace is not None else app.namespace
        self.app = app
        self.access = access
        self.namespace = check_namespace(chosen)
        context = Context(app, access, self.namespace)
        self.context = context
        self.runs = RunsService(context)
        """Runs: list, get, show, children, cancel, retry, defer."""
        self.jobs = JobsService(context)
        """Jobs: list, get, create, update, delete, pause, resume, trigger, next_fires."""
        self.dead_letters = DeadLettersService(context)
        """Dead runs and deliveries: list, requeue, purge."""
        self.workers = WorkersService(context)
        """Workers: list, get, drain, prune, unknown_tasks."""
        self.topics = TopicsService(context)
        """Topics: list, get, publish, read, set_retention."""
        self.subscriptions = SubscriptionsService(context)
        """Subscriptions: list, get, create, update, delete, pause, resume, replay,
        deliveries, delivery."""
        self.connectors = ConnectorsService(context)
        """Connectors: list, get, create, pause, resume, stop, restart, remove, dead_records."""
        self.tasks = TasksService(context)
        """Tasks: list (the app's and the live workers'), unserved hints."""
        self.tokens = TokensService(context)
        """API tokens (admin): create, list, get, revoke; authenticate (no access needed)."""
        self.console_sessions = ConsoleSessionsService(context)
        """Console sessions: open (log in with a token), resume, close (log out)."""
        self.namespaces = NamespacesService(context)
        """Namespaces: list and get (the caller's own); create, delete (admin)."""
        self.audit = AuditService(context)
        """The audit log: list (admin: all; others: their namespaces), record."""
        self.operations = OperationsService(context)
        """Bulk operations in the background: start, get, list, abort."""
        self.stats = StatsService(context)
        """Figures, cached a few seconds: counts by state, runs per minute."""
        self.overview = OverviewService(context)
        """The namespace's health in one snapshot, shared by every caller for ~2 s."""
        self.requests = RequestsService(context)
        """Idempotent requests: claim, finish, release, trim the records of their keys."""
        self.health = HealthService(context)
        """Readiness of the store (no access needed)."""
        self.alerts = AlertsService(context)
        """Alert rules (stored and the app's), alerts firing, silences, history."""

    def __repr__(self) -> str:
        return f"<Services actor={self.access.actor!r} namespace={self.namespace!r}>"

    def using(self, namespace: str) -> Services:
        """The same caller's services in another namespace."""
        return Services(self.app, self.access, namespace)
