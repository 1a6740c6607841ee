#!/bin/sh
# arbor's GPU check, from the folder `cargo xtask gpu-pack` builds (docs/gpu.md).
#
#   ./gpu-check REPORT_DIR [flags of arbor-gpu-check]
#
# The pack holds its binaries and data xz-compressed (bin/*.xz, data/**/*.xz); this script
# unpacks them once into a cache folder ($ARBOR_GPU_CACHE, default
# ${TMPDIR:-/tmp}/arbor-gpu-pack-COMMIT) with `xz`, or Python's lzma when there is no xz, and runs
# `arbor-gpu-check --pack CACHE REPORT_DIR ...` there. Needs a Linux x86-64 machine with an
# NVIDIA GPU and its driver; no Rust.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 1 ]; then
    echo "usage: $0 REPORT_DIR [flags of arbor-gpu-check]" >&2
    exit 2
fi
key=$(sed -n 's/.*"commit": *"\([^"]*\)".*/\1/p' "$here/manifest.json" 2>/dev/null | head -n 1)
cache="${ARBOR_GPU_CACHE:-${TMPDIR:-/tmp}/arbor-gpu-pack-${key:-unknown}}"

unxz_to() {
    if command -v xz >/dev/null 2>&1; then
        xz -dc "$1" >"$2.part"
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2.part"
    else
        echo "gpu-check: unpacking $1 needs xz or python3, and this machine has neither" >&2
        exit 2
    fi
    mv "$2.part" "$2"
}

if [ ! -f "$cache/.unpacked" ]; then
    rm -rf "$cache"
    mkdir -p "$cache"
    for f in $(cd "$here" && find . -type f | sort); do
        mkdir -p "$cache/$(dirname "$f")"
        case "$f" in
        *.xz) unxz_to "$here/$f" "$cache/${f%.xz}" ;;
        *) cp "$here/$f" "$cache/$f" ;;
        esac
    done
    chmod +x "$cache"/bin/*
    touch "$cache/.unpacked"
fi
exec "$cache/bin/arbor-gpu-check" --pack "$cache" "$@"
