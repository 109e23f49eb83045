#!/usr/bin/env bash
# Installs the services the tests use, when missing: redis-server, chromium,
# nginx, and curl and jq for the runnable examples of the docs (Debian
# packages). Needs root for apt-get; otherwise it says what to
# install and fails, so a test never skips silently.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || need+=(chromium)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: ${need[*]}; install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The Debian packages start their services; the tests start their own on
# random ports, so stop the system ones.
for svc in redis-server nginx; do
  if command -v service >/dev/null; then service "$svc" stop >/dev/null 2>&1 || true; fi
done
