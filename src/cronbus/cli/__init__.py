"""The ``cronbus`` command line: role commands that run processes, resource commands on the store.

Commands live in small modules: :mod:`.roles` (server, worker, scheduler, dispatcher),
:mod:`.runs` (runs, defer), :mod:`.dlq`, :mod:`.jobs`, :mod:`.workers`, :mod:`.events`,
:mod:`.subs`, :mod:`.connectors`, :mod:`.migrate`, :mod:`.loading` (finding the app and the
store) and :mod:`.render` (tables and JSON). A command's module is imported when that command runs
(:mod:`.lazy`): every test and script pays a command's start-up, and most need one command.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from .._version import __version__
from .lazy import LazyCommand, LazyGroup

__all__ = ["cronbus", "main"]

COMMANDS = {
    "server": LazyCommand(
        ".roles",
        "server",
        "Run every role in one process: the app's startup hooks, a scheduler, a worker, a "
        "dispatcher and the HTTP API (as `cronbus api`; --no-api leaves it out).",
    ),
    "worker": LazyCommand(
        ".roles", "worker", "Run a worker only: claim runs from the queues and execute them."
    ),
    "scheduler": LazyCommand(
        ".roles",
        "scheduler",
        "Run a scheduler only: fire due jobs into runs, exactly once per fire.",
    ),
    "dispatcher": LazyCommand(
        ".roles",
        "dispatcher",
        "Run a dispatcher only: push the events of subscriptions to their targets.",
    ),
    "jobs": LazyCommand(
        ".jobs", "jobs", "List, inspect, add, change, pause, resume, remove and fire jobs."
    ),
    "runs": LazyCommand(".runs", "runs", "List, inspect, cancel and retry runs."),
    "dlq": LazyCommand(
        ".dlq",
        "dlq",
        "Dead letters: runs and deliveries that used up their retries, kept with their last error.",
    ),
    "defer": LazyCommand(
        ".runs", "defer", "Create a run of TASK (a task name of the app) and print its id."
    ),
    "workers": LazyCommand(
        ".workers", "workers", "List, inspect and prune the workers registered in the store."
    ),
    "events": LazyCommand(
        ".events",
        "events",
        "Publish events, read topics, and set how long topics keep their events.",
    ),
    "subs": LazyCommand(
        ".subs",
        "subs",
        "Add, inspect, pause, replay and delete subscriptions, and see their deliveries.",
    ),
    "connectors": LazyCommand(
        ".connectors",
        "connectors",
        "Add, inspect, pause, resume, restart and remove connectors.",
    ),
    "top": LazyCommand(
        ".top",
        "top",
        "Watch queues, workers, scheduler lag, subscriptions and dead runs live (Ctrl-C quits).",
    ),
    "migrate": LazyCommand(
        ".migrate",
        "migrate",
        "Apply the store's pending migrations; print its schema version before and after.",
    ),
    "api": LazyCommand(
        ".api",
        "api",
        "Serve the HTTP API: jobs, runs, dead letters, workers, topics, subscriptions, tokens.",
    ),
    "tokens": LazyCommand(".tokens", "tokens", "Create, list and revoke API tokens (admin)."),
    "alerts": LazyCommand(
        ".alerts",
        "alerts",
        "List alert rules and what fires, see the history, silence rules, add and remove rules.",
    ),
    "namespaces": LazyCommand(
        ".namespaces",
        "namespaces",
        "List, create and delete namespaces (tenants, application groups).",
    ),
}
"""Every command of ``cronbus``: where it is defined, and the summary ``cronbus --help`` shows."""


@click.group(
    cls=LazyGroup,
    table=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", prog_name="cronbus")
def cronbus() -> None:
    """cronbus: a distributed job scheduler and event-push platform.

    Role commands (server, worker, scheduler, dispatcher, api) run until stopped with SIGTERM
    or Ctrl-C. Resource commands (jobs, runs, dlq, defer, workers, events, subs, connectors,
    tokens, namespaces) read and change the store named by --store, else by the --app's
    store, else by CRONBUS_STORE, else sqlite:///./cronbus.db; or, with --url (CRONBUS_URL)
    and --token (CRONBUS_TOKEN), work through a cronbus API server, with the same output
    (migrate works on the store only). Errors are one line on stderr and exit status 1.
    """


def main(args: Sequence[str] | None = None) -> None:
    """Run the command line (the ``cronbus`` console script and ``python -m cronbus``)."""
    cronbus.main(args=args, prog_name="cronbus")
