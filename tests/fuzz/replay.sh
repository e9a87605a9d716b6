#!/usr/bin/env bash
# Runs one fuzz target's replay binary (replay_main.cpp) over the seeds
# seeds.py cuts from the captures (the repository's, and ../shared/vectors
# when present) and over every regression input of that target.
#   replay.sh REPLAY_BINARY TARGET [SHARED_VECTORS_DIR]
set -euo pipefail
bin=$1 target=$2 shared=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dirs=("$root/tests/data/vectors")
[ -n "$shared" ] && [ -d "$shared" ] && dirs+=("$shared")
python3 "$here/seeds.py" "$tmp" "${dirs[@]}"
inputs=("$tmp/$target")
[ -d "$here/regressions/$target" ] && inputs+=("$here/regressions/$target")
exec "$bin" "${inputs[@]}"
