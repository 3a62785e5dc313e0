"""Alembic environment for hpsearch's own tables (run through `hpsearch migrate`).

The connection is handed in by `search.db.migrate`; tables live in schema `hpsearch` on PostgreSQL
and beside Optuna's on SQLite, with their own version table so Optuna's `alembic_version` is
never touched.
"""

from alembic import context

from search.db.migrate import VERSION_TABLE, schema_for

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    version_table=VERSION_TABLE,
    version_table_schema=schema_for(connection),
    transaction_per_migration=False,
)
with context.begin_transaction():
    context.run_migrations()
