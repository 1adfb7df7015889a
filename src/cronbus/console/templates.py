"""Rendering pages: the Jinja2 environment, its filters, and :func:`page`.

Templates live in ``templates/``; each page extends ``base.html`` and puts its live parts in
partials (``_name.html``) so an htmx request (``HX-Request``) gets the partial alone. Values are
escaped by default. Times are epoch seconds in the store; the filters show them in UTC with a
relative form beside ("3 min ago"), in a ``<time>`` element the browser can read.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from .. import run_figures
from .._version import __version__
from .session import CSRF_FIELD, Session

HERE = Path(__file__).parent
STATIC_DIR = HERE / "static"
TEMPLATE_DIR = HERE / "templates"

env = Environment(
    loader=FileSystemLoader(TEMPLATE_DIR),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def when(value: float | None) -> Markup:
    """An epoch time as ``<time>``: UTC date and time, the relative form as its title."""
    if value is None:
        return Markup('<span class="muted">—</span>')
    stamp = dt.datetime.fromtimestamp(value, dt.UTC)
    iso = stamp.isoformat(timespec="seconds").replace("+00:00", "Z")
    shown = stamp.strftime("%Y-%m-%d %H:%M:%S")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso, ago(value), shown)


def ago(value: float | None, now: float | None = None) -> str:
    """How long ago (or ahead) ``value`` is, in words: ``3 min ago``, ``in 2 h``."""
    if value is None:
        return "never"
    delta = (now if now is not None else time.time()) - value
    text = duration(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def duration(seconds: float | None) -> str:
    """A length of time, short: ``850 ms``, ``12 s``, ``4 min``, ``3 h``, ``2 d``."""
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def state_badge(state: object) -> Markup:
    """A state as a coloured badge (the colour says the kind, the text says the state)."""
    name = str(getattr(state, "value", state))
    return Markup('<span class="badge s-{0}">{0}</span>').format(name)


def as_json(value: Any) -> str:
    """A value as indented JSON, for payloads and results."""
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def query(request: Request, **changes: Any) -> str:
    """The request's own query string with ``changes`` (``None`` removes a parameter)."""
    params = dict(request.query_params)
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = str(value)
    return ("?" + urlencode(params)) if params else "?"


def csrf_field(session: Session) -> Markup:
    """The hidden input every change form carries."""
    return Markup('<input type="hidden" name="{}" value="{}">').format(
        CSRF_FIELD, escape(session.csrf)
    )


env.filters.update(when=when, ago=ago, duration=duration, badge=state_badge, as_json=as_json)
# A run's derived figures are worded by run_figures, as the CLI words them.
env.filters.update(
    attempts_text=run_figures.attempts_text,
    attempts_cell=run_figures.attempts_cell,
    run_duration=run_figures.duration,
)
env.globals.update(version=__version__, query=query, csrf_field=csrf_field)


def render(name: str, **context: Any) -> str:
    """A template rendered with ``context``."""
    return env.get_template(name).render(**context)


def page(
    request: Request,
    session: Session | None,
    template: str,
    *,
    partial: str | None = None,
    status: int = 200,
    title: str = "",
    nav: str = "",
    **context: Any,
) -> HTMLResponse:
    """A whole page, or only ``partial`` when htmx asks for a refresh of it.

    Every template sees ``request``, ``session`` (``None`` on the login page), ``title``,
    ``nav`` (the current section) and ``notice`` (the ``notice`` query parameter: what the
    last change did, shown once after its redirect).
    """
    chosen = template
    htmx = request.headers.get("hx-request") == "true"
    if partial is not None and htmx and request.headers.get("hx-boosted") != "true":
        chosen = partial
    body = render(
        chosen,
        request=request,
        session=session,
        title=title,
        nav=nav,
        notice=request.query_params.get("notice", ""),
        **context,
    )
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})
