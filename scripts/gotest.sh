#!/usr/bin/env bash
# Runs go test with the given arguments. When a test fails, the failing
# tests' own messages are repeated at the end, after the daemon logs a
# failed test prints at its clean-up, so the reason is the last thing on
# screen. The whole output stays above, and in a file named at the end.
set -uo pipefail
out=$(mktemp -t poolgate-go-test.XXXXXX)
"${GO:-go}" test "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then
  rm -f "$out"
else
  echo
  echo "=== what failed (the whole output is above and in $out)"
  grep -E '^\s*--- FAIL|^\s+[[:alnum:]_]+_test\.go:[0-9]+: |^panic: |WARNING: DATA RACE|race detected during execution|^FAIL\s' "$out" | cut -c1-400 | head -80
fi
exit "$rc"
