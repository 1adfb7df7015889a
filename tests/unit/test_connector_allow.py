"""The connectors' allow lists (:mod:`cronbus.connectors.allow`) and their settings: which
database a URL names however it is spelled, the store refused however it is spelled, and a
directory's sibling with the same prefix outside it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cronbus.config import Settings
from cronbus.connectors.allow import Reach, allowed_database, allowed_file, database_key
from cronbus.errors import ConfigurationError, ConnectorNotAllowedError, InvalidArgumentError


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("postgresql://app:secret@db.internal/shop", "postgresql://db.internal:5432/shop"),
        ("postgresql://localhost/shop", "postgresql://127.0.0.1:5432/shop"),
        ("postgresql:///shop?host=/var/run/postgresql", "postgres://[::1]/shop"),
        ("host=db.internal dbname=shop password=x", "postgresql://db.internal/shop"),
        ("postgresql://u@db.internal/shop?sslmode=require", "postgresql://db.internal/shop"),
        ("postgresql://db.internal/u", "postgresql://u@db.internal"),  # dbname defaults to user
    ],
)
def test_one_database_has_one_key_however_it_is_spelled(one: str, other: str) -> None:
    assert database_key(one) == database_key(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("postgresql://db.internal/shop", "postgresql://db.internal/shop2"),
        ("postgresql://db.internal/shop", "postgresql://db.internal:5433/shop"),
        ("postgresql://db.internal/shop", "postgresql://db.internal/shop?hostaddr=10.0.0.9"),
        ("postgresql://db.internal/shop", "postgresql://db.internal/shop?service=other"),
    ],
)
def test_other_databases_have_other_keys(one: str, other: str) -> None:
    assert database_key(one) != database_key(other)


def test_sqlite_files_are_compared_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real.db").touch()
    (tmp_path / "link.db").symlink_to(tmp_path / "real.db")
    same = {database_key(u) for u in ("sqlite:///real.db", f"sqlite:///{tmp_path}/link.db")}
    assert len(same) == 1
    with pytest.raises(ConnectorNotAllowedError, match=r"'\.\.'"):
        database_key("sqlite:///../x.db")
    with pytest.raises(InvalidArgumentError, match="not an sqlite"):
        database_key("mysql://db/x")


def test_the_store_is_refused_even_listed_however_it_is_spelled(tmp_path: Path) -> None:
    store = "postgresql://postgres@127.0.0.1:5432/test?schema=cronbus_x&pool_max=4"
    spelled = "postgresql://other:pw@localhost/test"
    reach = Reach(databases=(spelled,), store=store)
    with pytest.raises(ConnectorNotAllowedError, match="store's own database") as info:
        allowed_database(spelled, reach)
    assert info.value.field == "config.url"
    sqlite_store = f"sqlite:///{tmp_path}/bus.db?synchronous=normal"
    (tmp_path / "bus.db").touch()
    os.link(tmp_path / "bus.db", tmp_path / "hard.db")  # the same file under another name
    reach = Reach(databases=(f"sqlite:///{tmp_path}/hard.db",), store=sqlite_store)
    with pytest.raises(ConnectorNotAllowedError, match="store's own database"):
        allowed_database(f"sqlite:///{tmp_path}/hard.db", reach)


def test_only_listed_databases_are_allowed() -> None:
    reach = Reach(databases=("postgresql://u:pw@db.internal/shop",))
    assert allowed_database("postgresql://db.internal/shop", reach).name == "shop"
    with pytest.raises(ConnectorNotAllowedError) as info:
        allowed_database("postgresql://db.internal/other", reach)
    assert "pw" not in str(info.value)  # the list may hold passwords: never shown
    with pytest.raises(ConnectorNotAllowedError, match="switched off"):
        allowed_database("postgresql://db.internal/shop", Reach())


def test_a_sibling_with_the_directory_as_prefix_is_outside(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    reach = Reach(files=(str(tmp_path / "in"),))
    assert allowed_file(str(tmp_path / "in" / "a.jsonl"), reach) == str(tmp_path / "in/a.jsonl")
    with pytest.raises(ConnectorNotAllowedError, match="outside"):
        allowed_file(str(tmp_path / "in-other" / "a.jsonl"), reach)


def test_the_settings_are_read_from_the_environment_and_checked() -> None:
    env = {
        "CRONBUS_CONNECTOR_FILES": f"/srv/in{os.pathsep}/srv/out{os.pathsep}",
        "CRONBUS_CONNECTOR_DATABASES": "postgresql://db/a; host=db dbname=b\nsqlite:////x.db",
    }
    settings = Settings.load(env)
    assert settings.connector_files == ("/srv/in", "/srv/out")
    assert settings.connector_databases == (
        "postgresql://db/a",
        "host=db dbname=b",
        "sqlite:////x.db",
    )
    assert Settings.load({}).connector_files == ()
    with pytest.raises(ConfigurationError, match="CRONBUS_CONNECTOR_FILES: expected absolute"):
        Settings.load({"CRONBUS_CONNECTOR_FILES": "in"})
    with pytest.raises(ConfigurationError, match="CRONBUS_CONNECTOR_DATABASES"):
        Settings.load({"CRONBUS_CONNECTOR_DATABASES": "host=db nonsense=1"})
    with pytest.raises(ConfigurationError, match="connector_files: expected a list"):
        Settings(connector_files="/srv/in")  # type: ignore[arg-type]
