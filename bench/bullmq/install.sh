#!/bin/sh
# Installs BullMQ for make bench-jobs, when missing, from the npm registry
# into DEST (build/bullmq), at the versions bench/bullmq/package-lock.json
# pins: `npm ci`, install scripts off (BullMQ's one native part, msgpackr's,
# has a pure-JS fallback). Nothing of it is vendored into git: build/ is
# ignored. Exits 0 when DEST/node_modules is ready, 1 (one line on stderr
# saying why) when node, npm or the registry is missing.
#   sh bench/bullmq/install.sh [DEST]
set -eu
cd "$(dirname "$0")/../.."
SPEC=bench/bullmq
DEST=${1:-build/bullmq}
INSTALL_SECONDS=120             # npm ci of 20 small packages takes ~5 s
FETCH_TIMEOUT_MS=30000          # a registry that does not answer fails in 30 s, not npm's 5 min

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "BullMQ: no $tool on PATH" >&2
    exit 1
  fi
done

# Installed already, from this very lock file?
if [ -f "$DEST/node_modules/bullmq/package.json" ] &&
   cmp -s "$SPEC/package-lock.json" "$DEST/package-lock.json"; then
  exit 0
fi

rm -rf "$DEST"
mkdir -p "$DEST"
cp "$SPEC/package.json" "$SPEC/package-lock.json" "$DEST/"
if ! (cd "$DEST" && timeout "$INSTALL_SECONDS" npm ci --omit=dev --ignore-scripts \
        --no-audit --no-fund --loglevel=error --fetch-retries=1 \
        --fetch-timeout="$FETCH_TIMEOUT_MS") >"$DEST/npm.log" 2>&1; then
  echo "BullMQ: npm ci failed (no registry?): $(grep -m 1 '^npm error' "$DEST/npm.log" || echo timed out)" >&2
  rm -rf "$DEST/node_modules"
  exit 1
fi
