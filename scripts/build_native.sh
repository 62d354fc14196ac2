#!/usr/bin/env bash
# Builds loglake's native code: the record walk (platform/loglake/record/_walk.c) as a shared
# library that loglake.record.walk loads with ctypes. Optional: without a C compiler, or if
# the build fails, loglake walks records in Python, so this never fails set-up. Rebuilds only
# when the source is newer than the library; writes a temporary file and renames it, so a
# process loading the library never sees half of one. Safe to run again.
#   bash scripts/build_native.sh [OUTPUT]   (default: next to the source, where walk.py looks)
set -uo pipefail
cd "$(dirname "$0")/.."

src=platform/loglake/record/_walk.c
out=${1:-platform/loglake/record/libloglake_walk.so}
cc=${CC:-cc}

if [ -f "$out" ] && [ "$out" -nt "$src" ]; then
    exit 0
fi
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "note: no C compiler ($cc): loglake walks records in Python (slower Spark decode)" >&2
    exit 0
fi
tmp="$out.tmp.$$"
if "$cc" -O2 -Wall -Wextra -Werror -std=c11 -shared -fPIC -o "$tmp" "$src"; then
    mv -f "$tmp" "$out"
else
    rm -f "$tmp"
    echo "note: building $src failed: loglake walks records in Python (slower Spark decode)" >&2
fi
exit 0
