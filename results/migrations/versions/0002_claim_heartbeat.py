"""Claims a worker on another host can take over: ar_claims gains its holder's heartbeat.

A worker that holds a claim (to confirm a study's finalists) beats `heartbeat_at` while it works and
sets `finished_at` when the work is done. A claim whose holder stopped beating for longer than the
study's grace period is taken over by any worker, on any host; before, only a worker on the holder's
own host could tell that the holder was gone (its process had left). Rows written before this
revision read NULL in both; their `created_at` stands in for the last heartbeat.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from results.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a column already there is kept: a database adopted without a version table (0001 adopts any
    # layout) may have been written by code that already had it
    present = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("ar_claims")}
    for name in ("heartbeat_at", "finished_at"):
        if name not in present:
            op.add_column("ar_claims", sa.Column(name, UTCDateTime, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ar_claims") as batch:  # SQLite drops a column by copying the table
        batch.drop_column("finished_at")
        batch.drop_column("heartbeat_at")
