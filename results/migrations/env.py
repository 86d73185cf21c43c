"""Alembic's entry point for the results tables: runs on the connection results.migrate hands over."""

from alembic import context

from results.migrate import VERSION_TABLE
from results.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the results tables migrate through results.migrate.upgrade(engine), not the alembic CLI")
context.configure(connection=connection, target_metadata=metadata, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
