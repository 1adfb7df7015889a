"""Apps used by the tests, importable by worker subprocesses and spawned task processes."""
