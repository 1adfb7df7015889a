"""Observability: what cronbus tells its operators about itself.

Each concern is a module of its own (metrics, logs, and those that come beside them), imported
where it is used: nothing here is imported by ``import cronbus``, so a process that exports no
metrics never loads ``prometheus_client``.
"""
