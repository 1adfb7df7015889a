"""Commands imported when they are used: ``cronbus runs list`` imports the runs commands and
what they need, not the servers, the workers and the HTTP API of every other command.

A :class:`LazyGroup` holds :class:`LazyCommands`, a mapping from a command's name to the module
that defines it. Looking a command up (running it, ``cronbus runs --help``,
``group.commands["jobs"]``) imports that module; listing names does not; and the group's own
``--help`` lists every command with the summary kept in the table, importing none.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from gettext import gettext
from typing import Any

import click

from .loading import CronbusGroup


@dataclass(frozen=True, slots=True)
class LazyCommand:
    """Where a command is defined, and its help's first paragraph for the group's listing."""

    module: str
    """The module, relative to this package (``.runs``)."""
    attribute: str
    """The command's name in that module."""
    summary: str
    """The first paragraph of the command's help, as ``--help`` of the group shows it (a test
    checks it against the command's own help)."""

    def load(self) -> click.Command:
        """Import the module and return the command."""
        command = getattr(importlib.import_module(self.module, __package__), self.attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.module}.{self.attribute} is not a click command")
        return command


class LazyCommands(MutableMapping[str, click.Command]):
    """A group's commands by name, each imported on first lookup."""

    def __init__(self, table: Mapping[str, LazyCommand]) -> None:
        self._entries: dict[str, LazyCommand | click.Command] = dict(table)

    def __getitem__(self, name: str) -> click.Command:
        entry = self._entries[name]
        if isinstance(entry, LazyCommand):
            entry = self._entries[name] = entry.load()
        return entry

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._entries[name] = command

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def listed(self, name: str) -> click.Command:
        """The command as the group's listing shows it, without importing it: the loaded
        command, or a stand-in holding its summary."""
        entry = self._entries[name]
        if isinstance(entry, LazyCommand):
            return click.Command(name, help=entry.summary)
        return entry


class LazyGroup(CronbusGroup):
    """A :class:`~.loading.CronbusGroup` over :class:`LazyCommands`."""

    commands: LazyCommands

    def __init__(
        self, name: str | None = None, *, table: Mapping[str, LazyCommand], **kwargs: Any
    ) -> None:
        super().__init__(name, commands=LazyCommands(table), **kwargs)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List every command with its short help, as Click does, importing none of them."""
        shown = [
            (name, command)
            for name in self.list_commands(ctx)
            if not (command := self.commands.listed(name)).hidden
        ]
        if not shown:
            return
        # Click's layout: the help column gets what the longest name leaves of the width.
        limit = formatter.width - 6 - max(len(name) for name, _ in shown)
        with formatter.section(gettext("Commands")):
            formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in shown])
