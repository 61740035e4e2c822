#!/usr/bin/env bash
# `make serve-pg`: `make serve` with PostgreSQL under both the ledger and Prefect's server.
#   PRIVRELEASE_LEDGER_URL=postgresql://USER@HOST:PORT/DB   the database both use (the ledger in its own
#                                                           schema, privrelease; Prefect's tables in public)
# Keep the password out of the URL: libpq and asyncpg read PGPASSWORD or ~/.pgpass. Prefect's migration
# creates the pg_trgm extension: the server needs Debian's postgresql-contrib, and USER needs CREATE on DB.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${PRIVRELEASE_LEDGER_URL:?set PRIVRELEASE_LEDGER_URL=postgresql://USER@HOST:PORT/DB, the database the ledger and Prefect share}"
case "$PRIVRELEASE_LEDGER_URL" in
  postgresql://*|postgres://*) ;;
  *) echo "PRIVRELEASE_LEDGER_URL must be a postgresql://USER@HOST:PORT/DB URL" >&2; exit 2 ;;
esac
export PREFECT_API_DATABASE_CONNECTION_URL=${PREFECT_API_DATABASE_CONNECTION_URL:-postgresql+asyncpg://${PRIVRELEASE_LEDGER_URL#*://}}
redact() { sed -E 's#^([a-z+]+://[^:/@]*):[^@]*@#\1:***@#' <<< "$1"; }
echo "# ledger:         PRIVRELEASE_LEDGER_URL=$(redact "$PRIVRELEASE_LEDGER_URL")"
echo "# Prefect server: PREFECT_API_DATABASE_CONNECTION_URL=$(redact "$PREFECT_API_DATABASE_CONNECTION_URL")"
exec bash scripts/serve.sh
