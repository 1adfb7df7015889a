"""The app of dispatcher processes in cluster tests: no tasks, no code subscriptions.

Its subscriptions are webhooks the tests add through ``app.subscriptions``; a dispatcher
process of this app (``apps.run_dispatcher``) pushes them to a loopback server in the test.
"""

from __future__ import annotations

from cronbus import App

app = App()
