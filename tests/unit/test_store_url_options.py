"""Store URL options are read strictly and within bounds: a bad value is one StoreURLError line
that names the option, shows at most 80 characters of the value, and never a password."""

from __future__ import annotations

import pytest

from cronbus.errors import StoreURLError
from cronbus.store.postgres.url import parse_url as parse_pg
from cronbus.store.sqlite.url import parse_url as parse_sqlite

PG = "postgresql://app:s3cret@db.example/prod"


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("busy_timeout=-1", "busy_timeout"),
        ("busy_timeout=nan", "busy_timeout"),
        ("busy_timeout=inf", "busy_timeout"),
        ("busy_timeout=1e3", "busy_timeout"),
        ("busy_timeout=86401", "busy_timeout"),
        ("busy_timeout=", "busy_timeout"),
        ("busy_timeout=1_000", "busy_timeout"),
        ("busy_timeout=%D9%A3", "busy_timeout"),  # an Arabic-Indic digit, which float() takes
        ("synchronous=sometimes", "synchronous"),
    ],
)
def test_sqlite_options_out_of_range_or_not_numbers_are_refused(query: str, option: str) -> None:
    with pytest.raises(StoreURLError) as caught:
        parse_sqlite(f"sqlite:///x.db?{query}")
    message = str(caught.value)
    assert f"{option} must be" in message
    assert "\n" not in message


def test_sqlite_options_within_bounds_are_read() -> None:
    options = parse_sqlite("sqlite:///x.db?busy_timeout=2.5&synchronous=NORMAL")
    assert (options.busy_timeout, options.synchronous) == (2.5, "normal")
    assert parse_sqlite("sqlite:///x.db?busy_timeout=0").busy_timeout == 0.0
    assert parse_sqlite("sqlite:///x.db?busy_timeout=86400").busy_timeout == 86_400.0
    assert parse_sqlite("sqlite:///x.db").busy_timeout == 30.0


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("statement_timeout=-1", "statement_timeout"),
        ("statement_timeout=1e12", "statement_timeout"),
        ("statement_timeout=nan", "statement_timeout"),
        ("statement_timeout=86401", "statement_timeout"),
        ("pool_min=0", "pool_min"),
        ("pool_max=1001", "pool_max"),
        ("pool_max=2.5", "pool_max"),
        ("pool_max=-3", "pool_max"),
        ("pool_min=5&pool_max=2", "pool_max"),
        ("schema=Bad", "schema"),
    ],
)
def test_postgres_options_out_of_range_are_refused_without_the_password(
    query: str, option: str
) -> None:
    with pytest.raises(StoreURLError) as caught:
        parse_pg(f"{PG}?{query}")
    message = str(caught.value)
    assert f"{option} " in message
    assert "s3cret" not in message
    assert "app:***@db.example" in message


def test_a_password_in_the_query_is_not_shown_either() -> None:
    with pytest.raises(StoreURLError) as caught:
        parse_pg("postgresql://db.example/prod?user=app&password=s3cret&pool_max=0")
    assert "s3cret" not in str(caught.value)
    assert "password=***" in str(caught.value)


def test_a_long_bad_value_is_cut_to_80_characters() -> None:
    with pytest.raises(StoreURLError) as caught:
        parse_sqlite(f"sqlite:///x.db?busy_timeout={'9' * 5000}")
    assert len(str(caught.value)) < 300


def test_postgres_options_within_bounds_are_read() -> None:
    options = parse_pg(f"{PG}?statement_timeout=0&pool_min=2&pool_max=1000&schema=jobs_1")
    assert (options.statement_timeout, options.pool_min, options.pool_max) == (0.0, 2, 1000)
    assert options.schema == "jobs_1"
