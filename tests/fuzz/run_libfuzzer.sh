#!/usr/bin/env bash
# Runs a libFuzzer binary for a bounded time: seeds from the source tree, new
# inputs into a corpus folder in the build tree (kept between runs), and any
# crashing input written beside it for `$0 BINARY` to reproduce.
set -euo pipefail
binary=$1 seeds=$2 seconds=$3
corpus="$(dirname "$binary")/fuzz_decode_corpus"
mkdir -p "$corpus"
# libFuzzer exits 77 on a crash by default, which Meson reads as a skip.
exec "$binary" -max_total_time="$seconds" -timeout=10 -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$(dirname "$binary")/" "$corpus" "$seeds"
