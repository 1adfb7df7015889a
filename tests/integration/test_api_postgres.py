"""The API on PostgreSQL: the same flows as on SQLite (pages, idempotency claims under
concurrency, tokens, jobs, events, bulk operations), over real HTTP on a fresh schema.

Without a reachable server the tests are skipped locally and fail with ``CI=true``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contract.pg import pg_store_url
from integration import test_api_auth as auth
from integration import test_api_idempotency as idempotency
from integration import test_api_jobs as jobs
from integration import test_api_operations as operations
from integration import test_api_runs as runs
from integration import test_api_topics as topics
from integration.test_api_support import Api, make_app, served


@pytest.fixture
async def pg_api(request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    """The test app's API over real HTTP on a fresh PostgreSQL schema."""
    async with served(make_app(await pg_store_url(request))) as found:
        yield found


async def test_runs_pages_and_refusals(pg_api: Api) -> None:
    await runs.test_pages_walk_every_run_exactly_once(pg_api)
    await runs.test_cancel_and_retry(pg_api)


async def test_refusals_on_postgres(pg_api: Api) -> None:
    await runs.test_refusals_name_the_field(pg_api)


async def test_idempotency_under_concurrency(pg_api: Api) -> None:
    await idempotency.test_concurrent_repeats_create_one_run(pg_api)


async def test_idempotency_of_another_body(pg_api: Api) -> None:
    await idempotency.test_the_same_key_with_another_body_is_409(pg_api)


async def test_tokens_and_namespaces(pg_api: Api) -> None:
    await auth.test_a_token_acts_only_in_its_namespaces(pg_api)
    await auth.test_read_scope_changes_nothing(pg_api)


async def test_jobs_events_operations(pg_api: Api) -> None:
    await jobs.test_create_read_change_delete(pg_api)
    await topics.test_publish_one_and_a_batch_then_read_from_an_offset(pg_api)
    await operations.test_stats_and_audit(pg_api)
