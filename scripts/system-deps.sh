#!/usr/bin/env bash
# The Debian packages the test suite drives for real: chromium (the Prefect UI test, through
# Playwright), PostgreSQL 15 with its contrib extensions (the PostgreSQL ledger, Prefect on
# PostgreSQL), iproute2 (`ip netns`: two hosts on separate network stacks, which needs root) and nginx
# (the proxy `make serve` puts in front of the gate).
# Installs what is missing when run as root; otherwise says what to install.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql)
[ -f /usr/share/postgresql/15/extension/pg_trgm.control ] || need+=(postgresql-contrib)
command -v ip >/dev/null || need+=(iproute2)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || need+=(nginx)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "the test suite needs the Debian packages: ${need[*]} (install them with: sudo apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "installing the Debian packages the tests drive: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
