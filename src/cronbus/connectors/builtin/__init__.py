"""The connectors that ship with cronbus, by kind.

================  ======  ===============================================================
kind              way     what it does
================  ======  ===============================================================
``sql-source``    source  a table's new rows by an increasing key (SQLite or PostgreSQL)
``file-source``   source  a JSON lines file as it grows
``file-sink``     sink    a topic's events appended to a file, one CloudEvent per line
``http-sink``     sink    a topic's events POSTed to an endpoint as signed webhooks
``postgres-sink`` sink    each event's data upserted by key into a PostgreSQL table
================  ======  ===============================================================

Each module's docstring lists its config fields and defaults.
"""

from __future__ import annotations

from ...errors import ConnectorConfigError
from ..allow import NOWHERE, Reach, Reaching
from ..api import Connector
from .files import FileSinkConnector, FileSourceConnector
from .http_sink import HttpSinkConnector
from .postgres_sink import PostgresSinkConnector
from .sql_source import SqlSourceConnector

BUILTIN: dict[str, type[Connector]] = {
    connector.kind: connector
    for connector in (
        SqlSourceConnector,
        FileSourceConnector,
        FileSinkConnector,
        HttpSinkConnector,
        PostgresSinkConnector,
    )
}
"""Every built-in connector class by its kind."""


def connector_for(kind: str, reach: Reach = NOWHERE) -> Connector:
    """A new connector of ``kind`` (a file or database one limited to ``reach``);
    :class:`~cronbus.errors.ConnectorConfigError` (naming the known kinds) when there is none."""
    connector = BUILTIN.get(kind) if isinstance(kind, str) else None
    if connector is None:
        known = ", ".join(sorted(BUILTIN))
        raise ConnectorConfigError(
            f"kind: unknown connector kind {kind!r} (known: {known})", field="kind"
        )
    return connector(reach) if issubclass(connector, Reaching) else connector()


__all__ = [
    "BUILTIN",
    "FileSinkConnector",
    "FileSourceConnector",
    "HttpSinkConnector",
    "PostgresSinkConnector",
    "SqlSourceConnector",
    "connector_for",
]
