#!/usr/bin/env bash
# Coverage-guided fuzzing of Levee's hostile-input parsers with cargo-fuzz
# (libFuzzer), on the STABLE toolchain.
#
#   bench/fuzz.sh [SECONDS]          # each target for SECONDS (default 60)
#   FUZZ_TARGETS="sse inspect" bench/fuzz.sh 300
#   FUZZ_SANITIZER=address bench/fuzz.sh 60   # ASan too (uses RUSTC_BOOTSTRAP=1)
#
# Targets (fuzz/fuzz_targets/): retry_after (retry-after, retry-after-ms and
# the deadline headers), sse (the relay's event framer), inspect (model
# extraction, full validation and rewrite), config (YAML config loading),
# redact (provider-key redaction, tape paths, Redis URLs shown in messages),
# h1_request (where the caller-side HTTP/1 parser says each request on a
# connection ends, against a reference RFC 9112 framer), h1_answer (the
# same for the provider-side answer parser).
#
# How this works on stable: libFuzzer's coverage instrumentation is LLVM's
# SanitizerCoverage, which rustc reaches through stable codegen flags
# (-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-...). cargo-fuzz adds
# `-Zsanitizer=address` only for a sanitizer, so `--sanitizer none` builds and
# runs on stable with no nightly-only flag. Safe Rust gains little from ASan;
# a panic (including an overflow check: cargo-fuzz enables debug assertions)
# aborts the process and libFuzzer reports it as a crash. For ASan on stable,
# set FUZZ_SANITIZER=address: the script then sets RUSTC_BOOTSTRAP=1 so stable
# rustc accepts `-Zsanitizer=address` (no build-std; std is not instrumented).
#
# Corpora grow in fuzz/corpus/TARGET (gitignored), seeded from the committed
# fuzz/seeds/TARGET, with the libFuzzer dictionary fuzz/dicts/TARGET.dict; crashes land in fuzz/artifacts/TARGET (gitignored); the
# libFuzzer log of each run is fuzz/target/fuzz-logs/TARGET.log.
# Exits 1 if any target crashed, printing the artifact paths and a reproducer.
set -uo pipefail

SECS="${1:-60}"
case "$SECS" in
'' | *[!0-9]*)
    echo "usage: bench/fuzz.sh [SECONDS]" >&2
    exit 2
    ;;
esac
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT" || exit 2
TARGETS="${FUZZ_TARGETS:-retry_after sse inspect config redact h1_request h1_answer}"
SANITIZER="${FUZZ_SANITIZER:-none}"
# Own target dir: never fights the main workspace build for its lock.
export CARGO_TARGET_DIR="$ROOT/fuzz/target"
if [ "$SANITIZER" != none ]; then
    export RUSTC_BOOTSTRAP=1
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "[fuzz] cargo-fuzz missing: cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked || exit 2
fi

echo "[fuzz] building targets (sanitizer: $SANITIZER) ..."
if ! cargo fuzz build --sanitizer "$SANITIZER"; then
    echo "[fuzz] build failed" >&2
    exit 2
fi

LOGS="$ROOT/fuzz/target/fuzz-logs"
mkdir -p "$LOGS"
SUMMARY="$LOGS/summary.tsv"
printf 'target\tseconds\texecutions\tcorpus\tcrashes\n' >"$SUMMARY"
crashed=()
for t in $TARGETS; do
    corpus="fuzz/corpus/$t"
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus" "$artifacts" "fuzz/seeds/$t"
    before=$(find "$artifacts" -type f | wc -l)
    log="$LOGS/$t.log"
    marker="$LOGS/$t.start"
    touch "$marker"
    echo "[fuzz] $t: ${SECS}s (log: ${log#"$ROOT"/})"
    # -timeout: an input taking over 10 s is reported as a hang (a crash).
    extra=()
    if [ -f "fuzz/dicts/$t.dict" ]; then
        extra+=("-dict=fuzz/dicts/$t.dict")
    fi
    cargo fuzz run --sanitizer "$SANITIZER" "$t" "$corpus" "fuzz/seeds/$t" -- \
        -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "${extra[@]}" >"$log" 2>&1 &
    pid=$!
    # Progress: the latest libFuzzer status line every 15 s; bounded by the
    # run's own -max_total_time (plus a generous grace for start-up).
    waited=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if [ $((waited % 15)) -eq 0 ]; then
            line=$(grep -a -E '^#[0-9]+' "$log" | tail -n 1)
            echo "[fuzz]   $t +${waited}s ${line:-starting}"
        fi
        if [ "$waited" -gt $((SECS + 300)) ]; then
            echo "[fuzz]   $t: still running ${waited}s after start; stopping it" >&2
            kill "$pid" 2>/dev/null
            break
        fi
    done
    wait "$pid"
    rc=$?
    execs=$(grep -a 'stat::number_of_executed_units' "$log" | tail -n 1 | awk '{print $2}')
    size=$(find "$corpus" -type f | wc -l)
    after=$(find "$artifacts" -type f | wc -l)
    new=$((after - before))
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$SECS" "${execs:-?}" "$size" "$new" >>"$SUMMARY"
    echo "[fuzz] $t: exit $rc, ${execs:-?} executions, corpus $size files, $new new crash artifacts"
    if [ "$rc" -ne 0 ] || [ "$new" -gt 0 ]; then
        crashed+=("$t")
        grep -a -E 'panicked at|ERROR: libFuzzer|SUMMARY|Test unit written to' "$log" | head -n 20
        for a in $(find "$artifacts" -type f -newer "$marker"); do
            echo "[fuzz]   artifact: $a"
            echo "[fuzz]   reproduce: CARGO_TARGET_DIR=fuzz/target cargo fuzz run --sanitizer $SANITIZER $t $a"
            echo "[fuzz]   minimise:  CARGO_TARGET_DIR=fuzz/target cargo fuzz tmin --sanitizer $SANITIZER $t $a"
        done
    fi
done

echo "[fuzz] summary:"
column -t -s $'\t' "$SUMMARY" 2>/dev/null || cat "$SUMMARY"
if [ "${#crashed[@]}" -gt 0 ]; then
    echo "[fuzz] CRASHES in: ${crashed[*]}" >&2
    exit 1
fi
echo "[fuzz] no crashes"
