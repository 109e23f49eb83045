#!/usr/bin/env bash
# Runs every Fuzz target of the module for a short time each ($1, e.g. 5s).
#
# Go 1.26's fuzzing coordinator can fail a target with a bare "context
# deadline exceeded" at the end of -fuzztime, having found nothing and
# written no failing input (go.dev/issue/75804, fixed in Go 1.27). Such a
# run is repeated once; a target fails for real when it writes a failing
# input under testdata/fuzz, or fails in any other way, or fails twice.
set -euo pipefail
fuzztime=${1:-5s}

# fuzz_once runs one target; it returns 0 on success, 1 on a real failure
# and 2 on the coordinator's deadline race.
fuzz_once() {
  local pkg=$1 dir=$2 fn=$3 out before after rc=0
  before=$(ls "$dir/testdata/fuzz/$fn" 2>/dev/null | sort || true)
  out=$(mktemp)
  go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzztime" "$pkg" 2>&1 | tee "$out" || rc=$?
  after=$(ls "$dir/testdata/fuzz/$fn" 2>/dev/null | sort || true)
  if [ "$rc" -ne 0 ] && [ "$before" == "$after" ] &&
    grep -q '^    context deadline exceeded$' "$out" && ! grep -q 'Failing input written' "$out"; then
    rc=2
  elif [ "$rc" -ne 0 ]; then
    rc=1
  fi
  rm -f "$out"
  return "$rc"
}

for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -qs '^func Fuzz' "$dir"/*_test.go || continue
  for fn in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/'); do
    echo "fuzz $pkg $fn ($fuzztime)"
    rc=0
    fuzz_once "$pkg" "$dir" "$fn" || rc=$?
    if [ "$rc" -eq 2 ]; then
      echo "fuzz $pkg $fn: the coordinator's deadline race (go.dev/issue/75804), no failing input: once more"
      rc=0
      fuzz_once "$pkg" "$dir" "$fn" || rc=$?
    fi
    if [ "$rc" -ne 0 ]; then
      echo "fuzz $pkg $fn failed"
      exit 1
    fi
  done
done
