"""The ``cronbus`` command line: role commands that run processes, resource commands on the store.

Commands live in small modules: :mod:`.roles` (server, worker, scheduler, dispatcher),
:mod:`.runs` (runs, defer), :mod:`.dlq`, :mod:`.jobs`, :mod:`.workers`, :mod:`.events`,
:mod:`.subs`, :mod:`.migrate`, :mod:`.loading` (finding the app and the store) and
:mod:`.render` (tables and JSON).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from .._version import __version__
from .api import api
from .dlq import dlq
from .events import events
from .jobs import jobs
from .loading import CronbusGroup
from .migrate import migrate
from .namespaces import namespaces
from .roles import dispatcher, scheduler, server, worker
from .runs import defer, runs
from .subs import subs
from .tokens import tokens
from .workers import workers

__all__ = ["cronbus", "main"]


@click.group(cls=CronbusGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="cronbus")
def cronbus() -> None:
    """cronbus: a distributed job scheduler and event-push platform.

    Role commands (server, worker, scheduler, dispatcher, api) run until stopped with SIGTERM
    or Ctrl-C. Resource commands (jobs, runs, dlq, defer, workers, events, subs, tokens,
    namespaces) read and change the store named by --store, else by the --app's store, else
    by CRONBUS_STORE, else sqlite:///./cronbus.db; or, with --url (CRONBUS_URL) and --token
    (CRONBUS_TOKEN), work through a cronbus API server, with the same output. migrate works
    on the store only. Errors are one line on stderr and exit status 1.
    """


for command in (
    server,
    worker,
    scheduler,
    dispatcher,
    jobs,
    runs,
    dlq,
    defer,
    workers,
    events,
    subs,
    migrate,
    api,
    tokens,
    namespaces,
):
    cronbus.add_command(command)


def main(args: Sequence[str] | None = None) -> None:
    """Run the command line (the ``cronbus`` console script and ``python -m cronbus``)."""
    cronbus.main(args=args, prog_name="cronbus")
