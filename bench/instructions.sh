#!/usr/bin/env bash
# Instructions per scrape: the exporter's, and a static server's (`bench static-serve`)
# answering with the very headers and bytes the exporter sent, counted by callgrind over
# REQUESTS keep-alive requests of one client, gzip off and on. `bench serving` measures
# rates, which only an idle machine holds still; this count does not move with the load,
# so it tells a change of a few per cent apart anywhere (it does not see the kernel, cache
# misses or cores contending: `bench serving` does). Needs valgrind and curl.
#
#   bench/instructions.sh [REQUESTS]    # default 2000
#   EXPORTER=DIR/dcgm-exporter bench/instructions.sh    # another build's exporter
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
for tool in valgrind callgrind_control curl; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is not installed" >&2; exit 1; }
done
# The exporter alone, as users build it (its symbol list matches that build).
cargo build -q --release -p dcgm-exporter
cargo build -q --release -p dcgm-sim -p bench
dir=$PWD/target/release
exporter=${EXPORTER:-$dir/dcgm-exporter}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# Runs "$@" under callgrind, waits for "$addr" to answer, scrapes 50 times, then counts
# $n scrapes on one connection; prints the instructions per scrape.
count() {
    local tag=$1 gzip=$2; shift 2
    valgrind --tool=callgrind --callgrind-out-file="$work/$tag.out" "$@" \
        >"$work/$tag.stdout" 2>"$work/$tag.log" &
    local pid=$!
    for _ in $(seq 120); do
        addr=$(cat "$work/$tag.addr" 2>/dev/null || head -1 "$work/$tag.stdout")
        [ -n "$addr" ] && curl -sf -m 5 "http://$addr/metrics" >/dev/null && break
        sleep 1
    done
    local enc=() cfg="$work/$tag.curl"
    [ "$gzip" = on ] && enc=(-H 'Accept-Encoding: gzip')
    : >"$cfg"
    for _ in $(seq "$n"); do printf 'url = "http://%s/metrics"\noutput = /dev/null\n' "$addr" >>"$cfg"; done
    curl -s "${enc[@]}" -K <(head -100 "$cfg")
    callgrind_control -z "$pid" >/dev/null 2>&1
    curl -s "${enc[@]}" -K "$cfg"
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null || true
    local total
    total=$(awk '/^summary:/ {print $2}' "$work/$tag.out".*1 | head -1)
    echo $((total / n))
}

printf '%-9s %14s %14s %8s\n' gzip "ours instr/req" "static" ratio
for gzip in off on; do
    port=$((19600 + RANDOM % 300))
    echo "127.0.0.1:$port" >"$work/ours-$gzip.addr"
    ours=$(DCGM_SIM_PROFILE=etc/sim/large-bench.toml count "ours-$gzip" "$gzip" \
        "$exporter" -f bench/bench-counters.csv -a "127.0.0.1:$port" -c 600000 \
        --dcgm-library "$dir/libdcgm.so.4")
    enc=()
    [ "$gzip" = on ] && enc=(-H 'Accept-Encoding: gzip')
    # The exporter again, plainly, for the bytes and headers it sends.
    DCGM_SIM_PROFILE=etc/sim/large-bench.toml "$exporter" -f bench/bench-counters.csv \
        -a "127.0.0.1:$port" -c 600000 --dcgm-library "$dir/libdcgm.so.4" >/dev/null 2>&1 &
    plain=$!
    for _ in $(seq 60); do curl -sf -m 5 "http://127.0.0.1:$port/metrics" >/dev/null && break; sleep 1; done
    curl -s "${enc[@]}" -D "$work/head" -o "$work/body" "http://127.0.0.1:$port/metrics"
    kill "$plain"; wait "$plain" 2>/dev/null || true
    tail -n +2 "$work/head" | tr -d '\r' | grep -v '^$' >"$work/headers"
    static=$(count "static-$gzip" "$gzip" "$dir/bench" static-serve "$work/headers" "$work/body")
    printf '%-9s %14s %14s %8s\n' "$gzip" "$ours" "$static" "$(awk -v a="$ours" -v b="$static" 'BEGIN {printf "%.3f", a / b}')"
done
