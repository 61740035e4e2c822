#!/usr/bin/env bash
# `make serve`: a local Prefect server, the `privrelease` process work pool, every deployment of
# prefect.yaml, and a worker in the foreground (Ctrl-C stops the worker and the server).
# Each step is printed as the command an operator runs on their own server.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
export PRIVRELEASE_REPO=$PWD
export PRIVRELEASE_HOME=${PRIVRELEASE_HOME:-$PWD/.privrelease}
export PREFECT_HOME=${PREFECT_HOME:-$PRIVRELEASE_HOME/prefect-server}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# the worker asks for new runs every second (Prefect's default is 10 s: up to 10 s before a submitted run starts)
export PREFECT_WORKER_QUERY_SECONDS=${PREFECT_WORKER_QUERY_SECONDS:-1}
PORT=${PREFECT_PORT:-4200}
export PREFECT_API_URL=${PREFECT_API_URL:-http://127.0.0.1:$PORT/api}
mkdir -p "$PRIVRELEASE_HOME"

step() { printf '\n$ %s\n' "$*"; "$@"; }

echo "# server (on your own machine: PostgreSQL-backed, PREFECT_API_DATABASE_CONNECTION_URL=postgresql+asyncpg://...)"
printf '$ prefect server start --host 127.0.0.1 --port %s &\n' "$PORT"
"$BIN/prefect" server start --host 127.0.0.1 --port "$PORT" > "$PRIVRELEASE_HOME/server.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do curl -fs "$PREFECT_API_URL/health" > /dev/null && break; sleep 0.5; done
curl -fs "$PREFECT_API_URL/health" > /dev/null || { echo "the server did not start; see $PRIVRELEASE_HOME/server.log"; exit 1; }

echo "# the steward registers the demo datasets the deployments' default requests name"
step "$BIN/privrelease" --home "$PRIVRELEASE_HOME" demo --prepare-only
# the pool's job template fixes the worker's environment, command and folder: a flow run cannot set them
"$BIN/prefect" work-pool inspect privrelease > /dev/null 2>&1 || step "$BIN/prefect" work-pool create privrelease --type process --base-job-template deploy/process-pool.json
step "$BIN/prefect" --no-prompt deploy --all
echo
echo "UI: ${PREFECT_API_URL%/api}    state: $PRIVRELEASE_HOME"
echo "# remote workers: PREFECT_API_URL=$PREFECT_API_URL PRIVRELEASE_HOME=... prefect worker start --pool privrelease"
step "$BIN/prefect" worker start --pool privrelease --install-policy never
