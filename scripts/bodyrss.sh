#!/usr/bin/env bash
# Measures what large request bodies cost the gateway in memory: it starts a
# fresh daemon (the bundled simulator behind it), sends N requests of SIZE
# bytes at once, and prints the growth of the daemon's peak resident size
# (VmHWM, reset just before) over its resident size before them, in all and
# per byte of body. Each body is a system prompt of SIZE bytes and a short
# question, so the answer stays small, as a coding agent's turn does; with
# "refused" as the fourth argument the prompt is one message too large for
# a worker, which gets 413. Linux only (/proc). docs/hostile-inputs.md has
# the figures.
#
#   scripts/bodyrss.sh [bin/poolgate] [7500000] [1] [served|refused]
set -euo pipefail
bin=${1:-bin/poolgate}
size=${2:-7500000}
n=${3:-1}
kind=${4:-served}
dir=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT

filler() { head -c "$1" /dev/zero | tr '\0' 'a'; }
if [ "$kind" = refused ]; then
  { printf '{"model":"m","messages":[{"role":"user","content":"'; filler "$size"; printf '"}]}'; } >"$dir/body.json"
else
  { printf '{"model":"m","messages":[{"role":"system","content":"'; filler "$size"
    printf '"},{"role":"user","content":"hi"}]}'; } >"$dir/body.json"
fi

# A budget that admits every body: this measures their cost, not the cap.
POOLGATE_LISTEN=127.0.0.1:0 POOLGATE_DATA_DIR="$dir" POOLGATE_BODY_BUDGET_BYTES=$((4 * size * n + (64 << 20))) \
  "$bin" >"$dir/log" 2>&1 &
pid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/.*msg="poolgate listening" addr=\([^ ]*\).*/\1/p' "$dir/log")
  if [ -n "$addr" ] && curl -sf "http://$addr/readyz" >/dev/null; then break; fi
  sleep 0.2
done
[ -n "$addr" ] || { echo "the daemon did not start:" >&2; cat "$dir/log" >&2; exit 1; }
curl -sf -o /dev/null "http://$addr/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"m","messages":[{"role":"user","content":"warm up"}]}'
sleep 1
echo 5 >"/proc/$pid/clear_refs" # resets VmHWM to the resident size now
base=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
curls=()
for _ in $(seq "$n"); do
  curl -s -o /dev/null -w '%{http_code} ' "http://$addr/v1/chat/completions" -H 'content-type: application/json' \
    --data-binary @"$dir/body.json" &
  curls+=($!)
done
wait "${curls[@]}"
echo
peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
bytes=$(stat -c %s "$dir/body.json")
awk -v base="$base" -v peak="$peak" -v n="$n" -v bytes="$bytes" 'BEGIN {
  growth = (peak - base) * 1024
  printf "%d x %.1f MB body: RSS %.1f MiB before, peak %.1f MiB: growth %.1f MiB, %.2f times the bodies\n",
    n, bytes / 1e6, base / 1024, peak / 1024, growth / 1048576, growth / (n * bytes) }'
