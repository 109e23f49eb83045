#!/usr/bin/env bash
# Installs the coding agents the end-to-end tests run (Claude Code, Codex CLI,
# qwen-code, Gemini CLI) and the agent CLIs the pool runs as workers (Qoder
# CLI; Claude Code again), pinned by internal/agents/npm/package-lock.json, into a cache:
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
if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ] && "$bin/claude" --version >/dev/null 2>&1 && "$bin/qodercli" --version >/dev/null 2>&1; then
  exit 0
fi
echo "installing the pinned coding agents into $dir"
mkdir -p "$dir"
rm -f "$dir/.stamp"
cp "$src/package.json" "$src/package-lock.json" "$dir/"
# npm install, not npm ci: the lock pins every version, but npm writes only
# the optional platform packages of the machine that made it, and ci refuses
# such a lock on any other platform.
# Install scripts run with a throwaway HOME: qodercli's postinstall
# (configure-path) writes a launcher under ~/.qoder and edits PATH for the
# user who installs, which a test cache must not do. npm's own cache stays
# where it was.
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
npm_cache=$(npm config get cache)
(cd "$dir" && HOME=$home npm_config_cache=$npm_cache npm install --no-audit --no-fund --no-save --loglevel=error)
# Claude Code's postinstall puts its native binary in place; npm versions
# that hold install scripts back leave a placeholder, so run it when needed.
if ! "$bin/claude" --version >/dev/null 2>&1; then
  (cd "$dir/node_modules/@anthropic-ai/claude-code" && node install.cjs)
fi
# qwen-code ships ripgrep without its executable bit.
find "$dir/node_modules/@qwen-code" -path '*/vendor/ripgrep/*' -name rg -type f -exec chmod +x {} + 2>/dev/null || true
# qodercli finds ripgrep in its optional platform package (else rg on PATH)
# and needs sharp's prebuilt binary for images; say which is missing.
if [ ! -e "$dir/node_modules/@qoder-ai/qodercli-ripgrep-linux-x64" ] && [ ! -e "$dir/node_modules/@qoder-ai/qodercli-ripgrep-linux-arm64" ] && ! command -v rg >/dev/null; then
  echo "note: qodercli's ripgrep package is not installed here and rg is not on PATH; its Grep tool (which poolgate turns off) needs it" >&2
fi
(cd "$dir/node_modules/@qoder-ai/qodercli" && node -e 'require("sharp")') >/dev/null 2>&1 ||
  echo "note: sharp's prebuilt binary does not load for qodercli; it needs it only for images" >&2
for b in claude codex qwen gemini qodercli; do
  HOME=$(mktemp -d) "$bin/$b" --version >/dev/null 2>&1 || { echo "$b from $dir does not run" >&2; exit 1; }
done
echo "$stamp" > "$dir/.stamp"
