"""Finding the app and the store a command works on, and turning failures into one-line errors.

Resource commands find their store from ``--store``, else from the app named by ``--app`` (its
``store_url``), else ``CRONBUS_STORE``, else ``sqlite:///./cronbus.db``. Every failure a user can
cause (a bad option, an unknown run id, a store that cannot be opened) ends as one line,
``error: ...``, on stderr and exit status 1: a traceback would bury the one thing to fix.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from ..errors import CronbusError
from ..validation import shorten, unstorable_reason

if TYPE_CHECKING:
    # The app (and through it the stores and asyncio) is imported by the commands that open
    # one, not by `cronbus --help`, which imports this module for CronbusGroup.
    from ..app import App

T = TypeVar("T")
E = TypeVar("E", bound=enum.StrEnum)
FC = TypeVar("FC", bound=Callable[..., Any])

APP_HELP = (
    "The app, as MODULE:ATTRIBUTE (or MODULE when the attribute is named `app`), imported "
    "with the current folder first on the import path. Default: CRONBUS_APP."
)
STORE_HELP = (
    "The store URL, e.g. sqlite:///cronbus.db. Default: the app's store, else CRONBUS_STORE, "
    "else sqlite:///./cronbus.db."
)


class CliError(click.ClickException):
    """A failure reported as one line, ``error: ...``, with exit status 1."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        """Write the one-line message to stderr."""
        # Newlines in a wrapped message would break the promise of one line per error.
        message = " ".join(self.format_message().split())
        click.echo(f"error: {message}", file=file, err=file is None)


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn usage errors, cronbus errors and OS errors into a :class:`CliError`."""
    try:
        yield
    except (CliError, click.exceptions.NoArgsIsHelpError, BrokenPipeError):
        # NoArgsIsHelpError prints the help page, which is what `cronbus runs` alone should do;
        # a broken pipe is Click's to silence.
        raise
    except click.UsageError as exc:
        raise CliError(_usage_message(exc)) from None
    except click.ClickException as exc:
        raise CliError(exc.format_message()) from None
    except (CronbusError, OSError) as exc:
        raise CliError(str(exc) or type(exc).__name__) from None


def check_arguments(args: Sequence[str]) -> None:
    """Refuse a command-line argument holding a NUL or a lone surrogate (bytes that are not
    UTF-8), naming it, before any command sees it."""
    for index, arg in enumerate(args, start=1):
        reason = unstorable_reason(arg) if isinstance(arg, str) else None
        if reason is not None:
            raise CliError(f"argument {index} ({shorten(arg)}) {reason}: give UTF-8 text")


def _usage_message(exc: click.UsageError) -> str:
    message = exc.format_message()
    if exc.ctx is not None:
        message += f" (see '{exc.ctx.command_path} --help')"
    return message


INT_LIMIT = 2**63 - 1
"""Whole numbers typed on the command line fit a signed 64-bit integer, as store ids do."""


class CronbusCommand(click.Command):
    """A command whose whole-number arguments are refused in one line when no store could hold
    them (``runs show 99999999999999999999``), instead of overflowing in the store."""

    def invoke(self, ctx: click.Context) -> Any:
        """Check the parsed whole numbers, then run the command."""
        for param in self.params:
            values = ctx.params.get(param.name or "")
            for value in values if isinstance(values, tuple | list) else (values,):
                if isinstance(value, int) and not -INT_LIMIT - 1 <= value <= INT_LIMIT:
                    raise CliError(
                        f"{_label(param)} must be a whole number from {-INT_LIMIT - 1} to "
                        f"{INT_LIMIT}, got {shorten(value)}"
                    )
        return super().invoke(ctx)


def _label(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name


class CronbusGroup(click.Group):
    """A Click group whose commands report failures as one ``error: ...`` line."""

    command_class = CronbusCommand

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse this group's own options, reporting a bad one in one line.

        The top group first refuses arguments that are not text: a lone surrogate is how Python
        shows bytes that are not UTF-8, and no store, URL or JSON parser can take it.
        """
        with one_line_errors():
            if parent is None:
                check_arguments(args)
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the chosen subcommand, reporting its failures in one line."""
        with one_line_errors():
            return super().invoke(ctx)


def app_options(*, app_required: bool = False) -> Callable[[FC], FC]:
    """Add ``--app`` (as ``app_spec``) and ``--store`` (as ``store_url``) to a command."""

    def decorate(fn: FC) -> FC:
        fn = click.option("--store", "store_url", metavar="URL", help=STORE_HELP)(fn)
        return click.option(
            "--app",
            "app_spec",
            metavar="MODULE:ATTR",
            envvar="CRONBUS_APP",
            required=app_required,
            help=APP_HELP,
        )(fn)

    return decorate


def parse_states(
    kind: type[E],
) -> Callable[[click.Context, click.Parameter, tuple[str, ...]], tuple[E, ...]]:
    """A ``--state`` callback for states of ``kind`` (runs, workers, deliveries): the option
    given several times, comma separated, or both; an unknown name is a usage error."""

    def parse(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[E, ...]:
        states: list[E] = []
        for value in values:
            for name in filter(None, (part.strip().lower() for part in value.split(","))):
                try:
                    states.append(kind(name))
                except ValueError:
                    known = ", ".join(s.value for s in kind)
                    raise click.BadParameter(f"unknown state {name!r} (use {known})") from None
        return tuple(dict.fromkeys(states))

    return parse


def resolve_app(app_spec: str | None, store_url: str | None) -> App:
    """The app a command works on: the one ``--app`` names, or a bare app on the store."""
    from ..app import App

    if app_spec is None:
        # App() falls back to CRONBUS_STORE, then to the default SQLite file.
        return App(store=store_url)
    app = load_app(app_spec)
    if store_url is not None:
        app.use_store(store_url)
    return app


CREATING_COMMANDS = frozenset(
    {"defer", "jobs add", "subs add", "events publish", "tokens create", "namespaces create"}
)
"""The commands that may create the store they name: those that add something to it. Every
other resource command works on a store that exists, so a mistyped ``--store`` says "no such
store" instead of making an empty one and reporting that it holds nothing (roles and
``cronbus migrate`` create stores too, outside :func:`run_with_app`)."""


def run_with_app(app: App, work: Callable[[App], Awaitable[T]], *, create: bool | None = None) -> T:
    """Open ``app`` on a fresh event loop, await ``work(app)`` and close the app again.

    ``create`` says whether a missing store may be created; by default, only for the
    :data:`CREATING_COMMANDS` (outside a command, always).
    """
    import asyncio

    creating = _creating_command() if create is None else create

    async def session() -> T:
        await app.open_async(create=creating)
        try:
            return await work(app)
        finally:
            await app.close_async()

    return asyncio.run(session())


def _creating_command() -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return True
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.command.name or "")
        ctx = ctx.parent
    return " ".join(reversed(names)) in CREATING_COMMANDS


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (or ``module`` with an ``app``) and check it is an App."""
    from ..app import App

    module_name, colon, attribute = spec.strip().partition(":")
    if not module_name or (colon and not attribute):
        raise CliError(f"--app {spec!r} must look like module:attribute (for example myapp:app)")
    module = import_module(module_name)
    if not attribute:
        if not hasattr(module, "app"):
            raise CliError(_missing(module, module_name, "app"))
        attribute = "app"
    found = _lookup(module, module_name, attribute)
    if not isinstance(found, App):
        raise CliError(f"{module_name}:{attribute} is a {type(found).__name__}, not a cronbus App")
    return found


def import_module(name: str) -> ModuleType:
    """Import a user's module with the current folder first on ``sys.path``."""
    # The console script's sys.path[0] is the venv's bin folder, not where the user stands.
    cwd = os.getcwd()
    if not sys.path or sys.path[0] not in ("", cwd):
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except CronbusError as exc:
        # The module imported fine but cronbus refused something in it (a CRONBUS_* setting
        # read by App(), a task option): that is the one thing to fix, so say it alone.
        raise CliError(str(exc)) from None
    except ModuleNotFoundError as exc:
        raise CliError(f"cannot import module {name!r}: {exc}") from None
    except Exception as exc:
        raise CliError(f"cannot import module {name!r}: {_describe(exc)}") from None


def _describe(exc: Exception) -> str:
    """The exception and where user code raised it, in one line."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError):
        return text  # its message already names the file and line
    frames = traceback.extract_tb(exc.__traceback__)
    if frames:
        text += f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return text


def _lookup(module: ModuleType, module_name: str, attribute: str) -> object:
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise CliError(_missing(module, module_name, attribute))
        found = getattr(found, part)
    return found


def _missing(module: ModuleType, module_name: str, attribute: str) -> str:
    apps = _apps_in(module)
    hint = f"; it has {', '.join(f'{module_name}:{a}' for a in apps)}" if apps else ""
    return f"module {module_name!r} has no attribute {attribute!r}{hint}"


def _apps_in(module: ModuleType) -> Sequence[str]:
    from ..app import App

    return sorted(name for name, value in vars(module).items() if isinstance(value, App))
