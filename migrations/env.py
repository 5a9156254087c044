"""Alembic's environment: run the ledger's migrations online, or print them as SQL.

The URL comes from, in order: a connection handed over in `config.attributes`
(tests), `attributes["url"]` (`migrations.upgrade`), the ini's `sqlalchemy.url`
(`alembic -c alembic.ini`), then the same resolution the worker uses
(`PREEMPT_DATABASE_URL`, else the embedded SQLite file).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from preemptctl.ledger.engine import (
    configured_url,
    create_ledger_engine,
    normalise_url,
    sqlite_path,
)
from preemptctl.ledger.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    explicit = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return configured_url(explicit)


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_offline() -> None:
    context.configure(
        url=normalise_url(_url()),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    handed_over: Connection | None = config.attributes.get("connection")
    if handed_over is not None:
        _configure(handed_over)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = normalise_url(_url())
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_ledger_engine(url)
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
