"""Connectors: create (validated, split into tasks, idempotent), read with each task's lag,
pause, resume, stop, restart, remove, and their dead records.

What a connector shows is masked (:func:`mask_config`): secrets, header values and URL
credentials never leave the service. A connector's config is checked whole before the store
changes: the kind must be known (the built-ins and the app's own,
:class:`~cronbus.connectors.registry.ConnectorKinds`), the config a JSON object naming its
``topic``, and the kind's own ``validate`` must accept it; each refusal names its field
(``config.table: required``). A file or database connector may only touch what the operator
allows (:mod:`cronbus.connectors.allow`), and a connector uses topics of its own namespace only,
by the rule subscriptions follow (:func:`~cronbus.services.subscription_rules.topic_of`).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..connectors.allow import Reach
from ..connectors.api import SinkConnector, SourceConnector
from ..connectors.records import (
    Connector,
    ConnectorSpec,
    ConnectorTask,
    DeadRecord,
    Direction,
    Tolerance,
)
from ..connectors.states import TaskEvent
from ..errors import ConnectorConfigError, ConnectorNotFoundError, InvalidArgumentError
from ..events.event import validate_topic
from ..events.masking import MASK, mask_headers, mask_url
from ..validation import check_identifier, check_int, invalid
from .context import Context, naming
from .redaction import REDACTED
from .subscription_rules import claim_topic, topic_of

MAX_TASKS = 100
"""The most tasks a connector may be split into."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """One task as shown: the stored task and its lag (a sink's events not yet written;
    None for a source, whose backlog only the source knows)."""

    task: ConnectorTask
    lag: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorView:
    """A connector as shown: the stored connector, its tasks with their lag, its topic's end,
    and (from ``create``) whether this call created it."""

    connector: Connector
    tasks: tuple[TaskView, ...]
    topic_end: int
    created: bool | None = None

    @property
    def state(self) -> str:
        """One word for the connector: its tasks' state when they share one, else ``mixed``."""
        states = {view.task.state.value for view in self.tasks}
        return states.pop() if len(states) == 1 else "mixed"


class ConnectorsService:
    """Connectors of one namespace."""

    def __init__(self, context: Context) -> None:
        self._c = context

    # -- reads -----------------------------------------------------------------------------------
    async def list(self) -> builtins.list[ConnectorView]:
        """Every connector of the namespace, by name."""
        self._c.read()
        found = await self._c.store.list_connectors(namespace=self._c.namespace)
        return [await self._view(connector) for connector in found]

    async def get(self, name: str) -> ConnectorView:
        """One connector with its tasks."""
        self._c.read()
        return await self._view(await self._get(name))

    async def dead_records(
        self, name: str, limit: int = 100, before: int | None = None
    ) -> builtins.list[DeadRecord]:
        """The connector's dead records, newest first; a caller without the payloads
        permission sees each record's ``data`` as ``[redacted]`` (its error, partition, offset,
        id and type stay visible)."""
        self._c.read()
        connector = await self._get(name)
        with naming("limit"):
            limit = check_int(limit, "limit", low=1, high=1000)
        found = await self._c.store.list_dead_records(connector.name, limit, before)
        if self._c.access.payloads:
            return found
        return [replace(d, record={**d.record, "data": REDACTED}) for d in found]

    # -- changes ---------------------------------------------------------------------------------
    async def create(
        self,
        name: str,
        kind: str,
        config: Mapping[str, Any],
        *,
        tolerance: str = "none",
        max_tasks: int = 1,
    ) -> ConnectorView:
        """Create a connector (validated, split into tasks); the same definition again is a
        no-op (``created`` False), another under the same name a conflict, and one on a topic
        of another namespace a conflict too (as for a subscription)."""
        self._c.write()
        spec, task_configs = self.check(
            name, kind, config, tolerance=tolerance, max_tasks=max_tasks
        )
        store, namespace = self._c.store, self._c.namespace
        info = await topic_of(store, spec.topic, namespace, "a connector")
        connector, created = await store.create_connector(spec, task_configs, self._c.now())
        await claim_topic(store, info, namespace)
        if created:
            detail = {"kind": spec.kind, "topic": spec.topic, "tasks": len(task_configs)}
            await self._c.audit("connectors.create", spec.name, detail)
        view = await self._view(connector)
        return ConnectorView(
            connector=view.connector, tasks=view.tasks, topic_end=view.topic_end, created=created
        )

    def check(
        self,
        name: str,
        kind: str,
        config: Mapping[str, Any],
        *,
        tolerance: str = "none",
        max_tasks: int = 1,
    ) -> tuple[ConnectorSpec, builtins.list[dict[str, Any]]]:
        """The spec and task configs of a connector as given, or the error naming what is
        wrong (nothing is stored)."""
        with naming("name"):
            name = check_identifier(name, "connector name")
        with naming("kind"):
            plugin = self._c.app.connector_kinds.get(_text(kind, "kind"), Reach.of(self._c.app))
        if not isinstance(config, Mapping):
            raise ConnectorConfigError(
                f"config: must be a JSON object, not {config!r}", field="config"
            )
        _check_json(config)
        topic = config.get("topic")
        if topic is None:
            raise ConnectorConfigError("config.topic: required", field="config.topic")
        try:
            validate_topic(topic)
        except InvalidArgumentError as exc:
            raise ConnectorConfigError(f"config.topic: {exc}", field="config.topic") from None
        with naming("tolerance"):
            try:
                chosen = Tolerance(tolerance)
            except ValueError:
                raise invalid("tolerance", "must be 'none' or 'all'", tolerance) from None
        with naming("max_tasks"):
            max_tasks = check_int(max_tasks, "max_tasks", low=1, high=MAX_TASKS)
        with naming("config"):
            checked = plugin.validate(config)
        _check_json(checked)
        task_configs = [dict(c) for c in plugin.task_configs(checked, max_tasks)]
        if not 1 <= len(task_configs) <= max_tasks:
            raise ConnectorConfigError(
                f"kind {kind!r} split the config into {len(task_configs)} tasks, not 1 to "
                f"{max_tasks}"
            )
        direction = Direction.SOURCE if isinstance(plugin, SourceConnector) else Direction.SINK
        if not isinstance(plugin, (SourceConnector, SinkConnector)):
            raise ConnectorConfigError(
                f"kind {kind!r} is neither a source nor a sink", field="kind"
            )
        spec = ConnectorSpec(
            name=name,
            kind=kind,
            direction=direction,
            topic=str(checked.get("topic", topic)),
            config=checked,
            tolerance=chosen,
            max_tasks=max_tasks,
            namespace=self._c.namespace,
        )
        return spec, task_configs

    async def pause(self, name: str) -> ConnectorView:
        """Pause every task (they keep their positions)."""
        return await self._command(name, TaskEvent.PAUSE)

    async def resume(self, name: str) -> ConnectorView:
        """Resume paused or stopped tasks."""
        return await self._command(name, TaskEvent.RESUME)

    async def stop(self, name: str) -> ConnectorView:
        """Stop every task until resumed (they keep their positions)."""
        return await self._command(name, TaskEvent.STOP)

    async def restart(self, name: str, task: int | None = None) -> ConnectorView:
        """Restart every task (or one): failed ones run again, running ones start afresh from
        their committed positions on whichever worker takes them."""
        return await self._command(name, TaskEvent.RESTART, task)

    async def remove(self, name: str) -> None:
        """Delete the connector, its tasks, positions and dead records."""
        self._c.write()
        connector = await self._get(name)
        await self._c.store.delete_connector(connector.name)
        await self._c.audit("connectors.remove", connector.name)

    async def _command(self, name: str, event: TaskEvent, task: int | None = None) -> ConnectorView:
        self._c.write()
        connector = await self._get(name)
        if task is not None:
            with naming("task"):
                task = check_int(task, "task", low=0, high=len(connector.tasks) - 1)
        changed = await self._c.store.command_tasks(connector.name, event, self._c.now(), task)
        detail = {} if task is None else {"task": task}
        await self._c.audit(f"connectors.{event.value}", connector.name, detail)
        return await self._view(changed)

    async def _get(self, name: str) -> Connector:
        with naming("name"):
            name = check_identifier(name, "connector name")
        connector = await self._c.store.get_connector(name)
        self._c.owns(
            connector.spec.namespace, ConnectorNotFoundError(f"no connector named {name!r}")
        )
        return connector

    async def _view(self, connector: Connector) -> ConnectorView:
        connector = masked(connector)
        end = (await self._c.store.get_topic(connector.spec.topic)).last_offset
        sink = connector.spec.direction is Direction.SINK
        views = tuple(
            TaskView(
                task=task,
                lag=max(0, end - int(task.positions.get(connector.spec.topic, 0)))
                if sink
                else None,
            )
            for task in connector.tasks
        )
        return ConnectorView(connector=connector, tasks=views, topic_end=end)


_SECRET_FIELDS = frozenset({"secret", "secrets", "password", "token", "api_key"})


def masked(connector: Connector) -> Connector:
    """The connector as shown: secrets, header values and URL credentials and query values of
    its config (and its tasks' configs) replaced by ``***`` (the stored config keeps them)."""
    tasks = tuple(replace(task, config=mask_config(task.config)) for task in connector.tasks)
    spec = replace(connector.spec, config=mask_config(connector.spec.config))
    return replace(connector, spec=spec, tasks=tasks)


def mask_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A config with what must not be shown masked: fields named like secrets, header values,
    and the user info and query values of URLs (a file path or ``sqlite:///`` URL is kept)."""
    shown: dict[str, Any] = {}
    for name, value in config.items():
        if name in _SECRET_FIELDS:
            shown[name] = [MASK] * len(value) if isinstance(value, list) else MASK
        elif name == "headers" and isinstance(value, Mapping):
            shown[name] = mask_headers(value)
        elif isinstance(value, str) and "://" in value and not value.startswith("sqlite:"):
            shown[name] = mask_url(value)
        else:
            shown[name] = value
    return shown


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(field, "must be a non-empty string", value)
    return value


def _check_json(config: Mapping[str, Any]) -> None:
    try:
        json.dumps(config, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConnectorConfigError(f"config: must be JSON ({exc})", field="config") from None
