#!/usr/bin/env bash
# Runs every Fuzz target of the module for a short time each ($1, e.g. 5s).
set -euo pipefail
fuzztime=${1:-5s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  grep -qs '^func Fuzz' "$dir"/*_test.go || continue
  for fn in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/'); do
    echo "fuzz $pkg $fn ($fuzztime)"
    go test -run='^$' -fuzz="^${fn}\$" -fuzztime="$fuzztime" "$pkg"
  done
done
