#!/usr/bin/env bash
# Installs the coding agents the end-to-end tests run (Claude Code, Codex CLI,
# qwen-code, Gemini CLI), pinned by internal/agents/npm/package-lock.json, into a cache:
# $POOLGATE_AGENTS_DIR, else ${XDG_CACHE_HOME:-~/.cache}/poolgate/agents.
# Needs Node.js 20 or newer with npm; nothing is installed globally.
set -euo pipefail
src=$(cd "$(dirname "$0")/../internal/agents/npm" && pwd)
dir=${POOLGATE_AGENTS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/poolgate/agents}

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "the agent tests need Node.js 20+ with npm: install it from https://nodejs.org (or your distribution's nodejs/npm packages), then rerun make test" >&2
  exit 1
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "the agent tests need Node.js 20 or newer, found $(node --version): install a newer one from https://nodejs.org" >&2
  exit 1
fi

stamp=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
bin="$dir/node_modules/.bin"
if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && "$bin/claude" --version >/dev/null 2>&1; then
  exit 0
fi
echo "installing the pinned coding agents into $dir"
mkdir -p "$dir"
rm -f "$dir/.stamp"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
# npm install, not npm ci: the lock pins every version, but npm writes only
# the optional platform packages of the machine that made it, and ci refuses
# such a lock on any other platform.
(cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error)
# Claude Code's postinstall puts its native binary in place; npm versions
# that hold install scripts back leave a placeholder, so run it when needed.
if ! "$bin/claude" --version >/dev/null 2>&1; then
  (cd "$dir/node_modules/@anthropic-ai/claude-code" && node install.cjs)
fi
# qwen-code ships ripgrep without its executable bit.
find "$dir/node_modules/@qwen-code" -path '*/vendor/ripgrep/*' -name rg -type f -exec chmod +x {} + 2>/dev/null || true
for b in claude codex qwen gemini; do
  HOME=$(mktemp -d) "$bin/$b" --version >/dev/null 2>&1 || { echo "$b from $dir does not run" >&2; exit 1; }
done
echo "$stamp" > "$dir/.stamp"
