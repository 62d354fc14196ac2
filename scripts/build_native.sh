#!/usr/bin/env bash
# Builds loglake's native code as shared libraries that loglake loads with ctypes:
#   platform/loglake/record/_walk.c   -> libloglake_walk.so   (the record walk and record fields,
#                                                            loglake.record.walk and .columns)
#   platform/loglake/record/_encode.c -> libloglake_encode.so (HTTP produce's record encoding,
#                                                              loglake.record.native_encode)
# Optional: without a C compiler, or if a build fails, loglake does the same work in Python,
# so this never fails set-up. Rebuilds a library only when its source is newer; writes a
# temporary file and renames it, so a process loading the library never sees half of one.
# Safe to run again.
#   bash scripts/build_native.sh [WALK_OUTPUT [ENCODE_OUTPUT]]   (default: next to the sources,
#   where the Python modules look)
set -uo pipefail
cd "$(dirname "$0")/.."

cc=${CC:-cc}

build() {
    local src=$1 out=$2 what=$3
    if [ -f "$out" ] && [ "$out" -nt "$src" ]; then
        return
    fi
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "note: no C compiler ($cc): loglake does $what in Python (slower)" >&2
        return
    fi
    local tmp="$out.tmp.$$"
    if "$cc" -O2 -Wall -Wextra -Werror -std=c11 -shared -fPIC -o "$tmp" "$src"; then
        mv -f "$tmp" "$out"
    else
        rm -f "$tmp"
        echo "note: building $src failed: loglake does $what in Python (slower)" >&2
    fi
}

build platform/loglake/record/_walk.c "${1:-platform/loglake/record/libloglake_walk.so}" "the record walk (Spark decode, produce checks)"
build platform/loglake/record/_encode.c "${2:-platform/loglake/record/libloglake_encode.so}" "HTTP produce's record encoding"
exit 0
