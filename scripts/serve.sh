#!/usr/bin/env bash
# `make serve`: Prefect's server where only the operator reaches it, privrelease's gate in front of it and
# the proxy (nginx) in front of the gate, where people reach them (with TLS when PRIVRELEASE_TLS_CERT and
# PRIVRELEASE_TLS_KEY are set), the `privrelease` process work pool, every deployment of prefect.yaml, and a worker.
# Each step is printed as the command an operator runs on their own server. Ctrl-C (SIGINT) or
# SIGTERM stops all of it within seconds and exits 0; a second start works at once.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.venv/bin
export PATH="$BIN:$PATH"  # the pool's job command (python -m privrelease.gate.guard) runs the venv's python
export PRIVRELEASE_REPO=$PWD
# the command line's home (privrelease/core/paths.py: --home, else $PRIVRELEASE_HOME, else the per-user data folder), so
# `privrelease ...` typed anywhere reads the ledger this server writes
PRIVRELEASE_HOME=${PRIVRELEASE_HOME:-$("$BIN/python" -c 'from privrelease.core import paths; print(paths.home())')}
export PRIVRELEASE_HOME
export PREFECT_HOME=${PREFECT_HOME:-$PRIVRELEASE_HOME/prefect-server}
export PREFECT_SERVER_ANALYTICS_ENABLED=false
# the worker asks for new runs every second (Prefect's default is 10 s: up to 10 s before a submitted run starts)
export PREFECT_WORKER_QUERY_SECONDS=${PREFECT_WORKER_QUERY_SECONDS:-1}
PORT=${PRIVRELEASE_PORT:-4200}                  # the proxy: what people reach
PREFECT_PORT=${PRIVRELEASE_PREFECT_PORT:-4201}  # Prefect's own server: the operator only
GATE_PORT=${PRIVRELEASE_GATE_PORT:-4202}        # the gate, behind the proxy on 127.0.0.1
export PRIVRELEASE_PORT=$PORT PRIVRELEASE_GATE_PORT=$GATE_PORT
SCHEME=http; [ -n "${PRIVRELEASE_TLS_CERT:-}" ] && SCHEME=https
export PRIVRELEASE_PREFECT_URL=http://127.0.0.1:$PREFECT_PORT
export PREFECT_API_URL=$PRIVRELEASE_PREFECT_URL/api
export PREFECT_UI_API_URL=/api  # the UI calls its API where it was loaded from: the proxy, then the gate
export PREFECT_SERVER_UI_V2_ENABLED=false  # one UI (Prefect's v1), the one the gate's policy is written for
mkdir -p "$PRIVRELEASE_HOME"

# every port free before anything starts: a busy one is named at once (not after the start times out)
"$BIN/python" - "${PRIVRELEASE_HOST:-127.0.0.1}" "$PORT" "$PREFECT_PORT" "$GATE_PORT" <<'PY' || exit 1
import errno, socket, sys
host, people, prefect, gate = sys.argv[1:]
busy = 0
for port, bind, what, variable in ((people, host, "the proxy, where people reach the UI", "PRIVRELEASE_PORT"),
                                   (prefect, "127.0.0.1", "Prefect's server", "PRIVRELEASE_PREFECT_PORT"),
                                   (gate, "127.0.0.1", "the gate", "PRIVRELEASE_GATE_PORT")):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, int(port)))
        except OSError as exc:
            busy += 1
            why = "is in use by another program" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror})"
            print(f"privrelease: port {port} on {bind} ({what}) {why}; stop it (ss -ltnp 'sport = :{port}' "
                  f"names it) or set {variable} to a free port. Nothing was started.")
sys.exit(1 if busy else 0)
PY

# Prefect's own credential: the operator's alone (0600 in the home), asked of every call to Prefect's server
secret=$PRIVRELEASE_HOME/prefect-operator.secret
if [ ! -s "$secret" ]; then
  (umask 077; "$BIN/python" -c 'import secrets; print("operator:" + secrets.token_urlsafe(24))' > "$secret")
fi
PREFECT_SERVER_API_AUTH_STRING=$(cat "$secret")
export PREFECT_SERVER_API_AUTH_STRING PREFECT_API_AUTH_STRING=$PREFECT_SERVER_API_AUTH_STRING

children=()
stop() {  # stop CODE: every child, then exit CODE (0 when asked to stop)
  trap '' INT TERM  # a second signal (make passes its own on) must not cut the stop short
  for pid in "${children[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${children[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${children[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  echo "privrelease: stopped the worker, the proxy, the gate and Prefect's server"
  exit "${1:-0}"
}
trap 'stop 0' INT TERM
# each child in its own process group (setsid): stop() ends it with all it started
# each child's output appended (O_APPEND) to its log, which `python -m privrelease.gate.logs` can then cut in place
start() { local log=$1; shift; setsid "$@" >> "$log" 2>&1 & children+=($!); }
wait_for() {  # -k: a certificate for the host's public name need not name 127.0.0.1
  for _ in $(seq 1 240); do curl -fsk "$1" > /dev/null && return 0; sleep 0.5; done
  echo "$2 did not start; see $3"; stop 1
}

echo "# every log here kept under \$PRIVRELEASE_LOG_MB MB (default 64), with 2 older files (docs/OPERATING.md)"
"$BIN/python" -m privrelease.gate.logs --check || exit 1
printf '$ python -m privrelease.gate.logs server.log gate.log proxy.log worker.log logs.log proxy/access.log &\n'
start "$PRIVRELEASE_HOME/logs.log" "$BIN/python" -m privrelease.gate.logs "$PRIVRELEASE_HOME"/{server,gate,proxy,worker,logs}.log "$PRIVRELEASE_HOME/proxy/access.log"

echo "# Prefect's server, reachable from this host only, asking for the operator's credential"
printf '$ PREFECT_SERVER_API_AUTH_STRING=... prefect server start --host 127.0.0.1 --port %s &\n' "$PREFECT_PORT"
start "$PRIVRELEASE_HOME/server.log" "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT"
wait_for "$PREFECT_API_URL/health" "Prefect's server" "$PRIVRELEASE_HOME/server.log"

echo "# the gate, which decides every call people make with their accounts, on this host only"
printf '$ python -m privrelease.gate  # on 127.0.0.1:%s\n' "$GATE_PORT"
start "$PRIVRELEASE_HOME/gate.log" "$BIN/python" -m privrelease.gate
wait_for "http://127.0.0.1:$GATE_PORT/api/health" "the gate" "$PRIVRELEASE_HOME/gate.log"

echo "# the proxy (nginx) in front of the gate, where people reach the UI and the API"
printf '$ python -m privrelease.gate.proxy  # nginx on %s:%s, configuration from deploy/nginx.conf\n' "${PRIVRELEASE_HOST:-127.0.0.1}" "$PORT"
start "$PRIVRELEASE_HOME/proxy.log" "$BIN/python" -m privrelease.gate.proxy
wait_for "$SCHEME://127.0.0.1:$PORT/api/health" "the proxy" "$PRIVRELEASE_HOME/proxy.log"

# where the ledger's anchors are, and what the operator should fix (anchors inside the home, private files others can read)
"$BIN/privrelease" --home "$PRIVRELEASE_HOME" info | grep -E '^(home|ledger_anchors) ' || true

# the steward registers the demo datasets the deployments' default requests name, once: a restart keeps them
if "$BIN/privrelease" --home "$PRIVRELEASE_HOME" dataset list --json | "$BIN/python" -c '
import json, sys
from privrelease.core.datasets.demo import DATASETS
try:
    registered = {d["id"] for d in json.load(sys.stdin)}
except ValueError:  # no list to read: register them (that command then says what is wrong)
    registered = set()
sys.exit(0 if set(DATASETS) - registered else 1)'; then
  echo "# the steward registers the demo datasets the deployments' default requests name"
  printf '\n$ privrelease --home %s demo --prepare-only\n' "$PRIVRELEASE_HOME"
  "$BIN/privrelease" --home "$PRIVRELEASE_HOME" demo --prepare-only
else
  echo "# the demo datasets the deployments' default requests name are registered (privrelease dataset list)"
fi
# the pool's job template fixes the worker's environment, command (the guard) and folder: a flow run cannot set them
if ! "$BIN/prefect" work-pool inspect privrelease > /dev/null 2>&1; then
  printf '\n$ prefect work-pool create privrelease --type process --base-job-template deploy/process-pool.json\n'
  "$BIN/prefect" work-pool create privrelease --type process --base-job-template deploy/process-pool.json
fi
# how many runs at once, over all workers and on this one ($PRIVRELEASE_POOL_LIMIT, $PRIVRELEASE_WORKER_LIMIT; privrelease/core/limits.py)
POOL_LIMIT=$("$BIN/python" -m privrelease.core.limits pool) || stop 1
WORKER_LIMIT=$("$BIN/python" -m privrelease.core.limits worker) || stop 1
printf '$ prefect work-pool set-concurrency-limit privrelease %s\n' "$POOL_LIMIT"
"$BIN/prefect" work-pool set-concurrency-limit privrelease "$POOL_LIMIT" > /dev/null
printf '\n$ prefect --no-prompt deploy --all\n'
# (wide lines: Prefect draws its report in boxes wrapped at the terminal's width); the forms' dataset and column fields
# are stored as text: the gate fills in the registered datasets and their columns whenever the UI opens a form (privrelease/gate/forms.py)
COLUMNS=240 "$BIN/prefect" --no-prompt deploy --all > "$PRIVRELEASE_HOME/deploy.log" 2>&1 || { tail -20 "$PRIVRELEASE_HOME/deploy.log"; stop 1; }
deployed=$(grep -oE "Deployment '[^']+' successfully" "$PRIVRELEASE_HOME/deploy.log" | sed -E "s/Deployment '([^']+)' successfully/  \1/" || true)
if [ -n "$deployed" ]; then echo "deployments:"; echo "$deployed"; else echo "no deployment was reported; see $PRIVRELEASE_HOME/deploy.log"; fi

printf '\n$ prefect worker start --pool privrelease --install-policy never --limit %s &\n' "$WORKER_LIMIT"
start "$PRIVRELEASE_HOME/worker.log" "$BIN/prefect" worker start --pool privrelease --install-policy never --limit "$WORKER_LIMIT"

accounts=$("$BIN/privrelease" --home "$PRIVRELEASE_HOME" user list --json | "$BIN/python" -c 'import json,sys; print(len(json.load(sys.stdin)))')
cat <<EOF

UI (people, through the proxy and the gate):  $SCHEME://${PRIVRELEASE_HOST:-127.0.0.1}:$PORT   sign in as NAME:PASSWORD
Prefect's server (operator):     $PREFECT_API_URL   credential in $secret
state: $PRIVRELEASE_HOME   logs: server.log gate.log proxy.log worker.log proxy/access.log there (each rotated past ${PRIVRELEASE_LOG_MB:-64} MB)
EOF
if [ "$accounts" = 0 ]; then
  cat <<EOF
no accounts yet; add the first ones (a random password is made and shown once without --password-stdin):
  .venv/bin/privrelease --home $PRIVRELEASE_HOME user add alice --role analyst
  .venv/bin/privrelease --home $PRIVRELEASE_HOME user add sam --role steward
  .venv/bin/privrelease --home $PRIVRELEASE_HOME user add ada --role auditor
EOF
fi
echo "# remote workers: PREFECT_API_URL=$PREFECT_API_URL PREFECT_API_AUTH_STRING=... PRIVRELEASE_HOME=... prefect worker start --pool privrelease --limit $WORKER_LIMIT"
echo "Ctrl-C stops it all."
while true; do
  for pid in "${children[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "a service stopped (pid $pid); see the logs in $PRIVRELEASE_HOME"; stop 1; }
  done
  sleep 1 &
  wait $! || true
done
