# One entry point for people and CI. Each target creates .venv when it is missing.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The `bench` extra (Redis, Huey, Dramatiq: the peers bench/peers.py measures cronbus against).
BENCH_STAMP := $(VENV)/.installed-bench
# Test processes side by side: most tests wait on subprocesses, sockets and fsync, not on a core.
TEST_WORKERS ?= 3

# The console's browser tests drive Debian's Chromium (no browser download).
CHROMIUM := /usr/bin/chromium


.PHONY: test-week sqlite-soak
.PHONY: demo test check lint typecheck bench clean console-assets

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

demo: $(STAMP)  ## run `cronbus server` with the demo app on an embedded SQLite file
	@printf 'Console: http://127.0.0.1:8787/  log in with this token (admin, valid one day):\n  %s\n' \
		"$$($(VENV)/bin/cronbus tokens create --scope admin --namespace '*' --name demo \
		--expires 86400 --store sqlite:///./demo.db 2>/dev/null)"
	$(VENV)/bin/cronbus server --app cronbus.demo:app --store sqlite:///./demo.db

$(CHROMIUM):
	apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q && apt-get install -y -q chromium)

test: $(STAMP) $(BENCH_STAMP) $(CHROMIUM)  ## lint, type-check and run the whole test suite
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	@# The tests start many cronbus subprocesses; with PYTHONDONTWRITEBYTECODE set, each would
	@# compile the package again, so compile it once.
	$(PY) -m compileall -q src tests bench
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not serial"
	$(PY) -m pytest -q -m serial

check: test

test-week: $(STAMP)  ## the retention test of issue 14 at full size: 1,000,000 runs over a simulated week
	CRONBUS_WEEK_RUNS=1000000 CRONBUS_WEEK_STRICT=1 $(PY) -m pytest -s -q -m slow tests/integration/test_retention_week.py

sqlite-soak: $(STAMP)  ## issue 30's two-process SQLite test (a role and CLI commands, two roles) for 1,000 rounds
	@# Its two cases side by side (-n 2): each round waits on CLI processes more than on a core.
	CRONBUS_SQLITE_SOAK_ROUNDS=1000 $(PY) -m pytest -q -p no:cacheprovider -o timeout=7200 -n 2 \
		tests/acceptance/test_cli_store_faults.py -k second_process

bench: $(BENCH_STAMP)  ## print throughput and latency figures, then cronbus beside Huey and Dramatiq
	$(PY) bench/run.py
	@if $(PY) -c "import redis; redis.Redis(host='127.0.0.1', port=6379, socket_connect_timeout=2).ping()" \
		2>/dev/null; then $(PY) bench/peers.py; \
	else echo "bench/peers.py skipped: Redis does not answer at 127.0.0.1:6379"; fi

console-assets:  ## refresh the console's vendored htmx from npm (not needed to build or test)
	cd /tmp && npm pack htmx.org@2 >/dev/null && tar xzf htmx.org-2*.tgz package/dist/htmx.min.js
	cp /tmp/package/dist/htmx.min.js src/cronbus/console/static/vendor/htmx.min.js

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo.db*
