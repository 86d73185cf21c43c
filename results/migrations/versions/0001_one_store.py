"""One results store: adopt the tables the old ad hoc stores (autoresearch/db.py, eval/store.py) made.

Takes any results.db to the schema of results/schema.py, rows kept:
- a fresh database, or one missing tables (ar_claims came late; a database only one old store ever
  opened): the missing tables are created as results/schema.py defines them, except ar_claims,
  created as it was at this revision (below: revision 0002 adds its heartbeat). A later revision
  that changes a table must likewise first copy the table's definition as it is now into this file.
- eval_fidelity_measurements.top1_decisive_agreement, which the old code added by a hand-written
  ALTER when missing: added the same way (nullable; older rows read NULL).
- PostgreSQL: the ar_* created_at columns were `timestamp` holding naive UTC, now `timestamptz`;
  ar_finalists.verdict was Text holding JSON, now `json`. On SQLite the stored values already read
  back right through the new column types (UTC wall time; JSON text), so nothing is rewritten.

Revision ID: 0001
Revises: (none)
"""

import sqlalchemy as sa
from alembic import op

from results.schema import UTCDateTime, metadata, now

# ar_claims as it was at this revision (0002 adds heartbeat_at and finished_at)
_claims_0001 = sa.Table(
    "ar_claims", sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("study", sa.String(200), nullable=False),
    sa.Column("what", sa.String(80), nullable=False),
    sa.Column("key", sa.String(200), nullable=False),
    sa.Column("worker", sa.String(200), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False, default=now),
    sa.UniqueConstraint("study", "what", "key", name="uq_ar_claims_once"),
)

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    present = set(inspector.get_table_names())
    for table in metadata.sorted_tables:
        if table.name not in present:
            (_claims_0001 if table.name == _claims_0001.name else table).create(bind)

    def columns(table: str) -> dict[str, sa.types.TypeEngine]:
        return {c["name"]: c["type"] for c in inspector.get_columns(table)}

    if "eval_fidelity_measurements" in present and \
            "top1_decisive_agreement" not in columns("eval_fidelity_measurements"):
        op.add_column("eval_fidelity_measurements", sa.Column("top1_decisive_agreement", sa.Float, nullable=True))
    if bind.dialect.name != "postgresql":
        return
    for table in sorted(present.intersection(metadata.tables)):  # the old ar_* tables' timestamps
        created = columns(table).get("created_at")
        if isinstance(created, sa.DateTime) and not created.timezone:
            op.alter_column(table, "created_at", type_=sa.DateTime(timezone=True),
                            postgresql_using="created_at AT TIME ZONE 'UTC'")
    if "ar_finalists" in present and not isinstance(columns("ar_finalists")["verdict"], sa.JSON):
        op.alter_column("ar_finalists", "verdict", type_=sa.JSON, postgresql_using="verdict::json")


def downgrade() -> None:
    raise NotImplementedError("the old ad hoc stores are not restored")
