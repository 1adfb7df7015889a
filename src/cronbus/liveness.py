"""When a worker is lost: the one rule every door applies.

A worker registers its own lease (``lease_seconds``: its heartbeat interval divided by its
``heartbeat_fraction``, 30 s by default) and renews the leases of the runs it holds with every
heartbeat. It is **lost** when more than that registered lease has passed since its last
heartbeat, which is exactly when the leases of its runs have expired and any reaper takes them
back. It is **live** (claims runs, is chosen by routing and broadcasts) while it is ``alive``
in the registry and not lost. The lease of the process that *reads* the registry (the CLI, the
API, the console, metrics) plays no part: a worker started with a 10 s lease is lost 10 s
after its last heartbeat whatever the reader's settings say.

The rule is written three times, each from this module: :func:`is_lost` in Python, and
:func:`live_sql` for the two stores' routing queries (which must pick workers inside the
transaction that pins runs to them). docs/cluster.md ("Lost workers") describes it for users.
"""

from __future__ import annotations

from .model import WorkerInfo, WorkerState

__all__ = ["is_live", "is_lost", "live_sql", "reported_state"]


def is_lost(state: WorkerState, heartbeat_at: float, lease_seconds: float, now: float) -> bool:
    """Whether a registered worker is lost at ``now``: not stopped (a stopped worker said
    goodbye), and silent for longer than its own registered lease."""
    return state is not WorkerState.STOPPED and heartbeat_at + lease_seconds < now


def reported_state(
    state: WorkerState, heartbeat_at: float, lease_seconds: float, now: float
) -> WorkerState:
    """A registered worker's state as every door reports it: ``lost`` when :func:`is_lost`,
    else the state its registry row holds."""
    if is_lost(state, heartbeat_at, lease_seconds, now):
        return WorkerState.LOST
    return state


def is_live(worker: WorkerInfo, now: float) -> bool:
    """Whether ``worker`` may claim runs and be routed to at ``now``: ``alive`` (not draining,
    stopped or lost) with a heartbeat within its own lease."""
    return worker.state is WorkerState.ALIVE and not is_lost(
        worker.state, worker.heartbeat_at, worker.lease_seconds, now
    )


def live_sql(now: str, alias: str = "") -> str:
    """:func:`is_live` as an SQL condition on the ``workers`` table, for both stores: ``now``
    is the placeholder of the reader's time (``:now``, ``%(now)s``), ``alias`` the table's
    (``"w"``) or none."""
    w = f"{alias}." if alias else ""
    return f"{w}state = '{WorkerState.ALIVE.value}' AND {w}heartbeat_at + {w}lease_seconds >= {now}"
