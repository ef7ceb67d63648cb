#!/usr/bin/env bash
# Makes etc/symbol-order.txt: the exporter's functions that a start and steady collection
# run, for the linker to lay out first (build/symbol_order.rs). Run it after updating
# dependencies or rustc; a stale list only orders less. Needs valgrind.
#
#   bench/symbol-order.sh [SECONDS]    # each backend's run under callgrind, default 60
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v valgrind >/dev/null || { echo "symbol-order.sh: valgrind is not installed" >&2; exit 1; }
# The names must be those of the build users make: the exporter alone (features resolved
# for it only), then the simulators on their own.
cargo build -q --release -p dcgm-exporter
cargo build -q --release -p dcgm-sim -p nvml-sim
dir=target/release
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=19490
for backend in nvml dcgm; do
    port=$((port + 1))
    case $backend in
        nvml) lib=(--backend nvml --nvml-library "$dir/libnvidia-ml.so.1") ;;
        dcgm) lib=(--backend dcgm --dcgm-library "$dir/libdcgm.so.4") ;;
    esac
    DCGM_SIM_PROFILE=etc/sim/h100-8gpu-nvswitch.toml timeout -s INT "$secs" \
        valgrind --tool=callgrind --demangle=no --callgrind-out-file="$work/$backend.out" \
        "$dir/dcgm-exporter" -f etc/default-counters.csv -a "127.0.0.1:$port" -c 1000 \
        "${lib[@]}" >/dev/null 2>"$work/$backend.log" &
    run=$!
    # Scrapes of every kind a Prometheus and a probe make, once the page is up.
    for _ in $(seq "$secs"); do
        curl -sf -m 5 "127.0.0.1:$port/metrics" >/dev/null && break
        sleep 1
    done
    for _ in $(seq $((secs / 4))); do
        curl -s -m 10 "127.0.0.1:$port/metrics" >/dev/null || true
        curl -s -m 10 -H 'Accept-Encoding: gzip' "127.0.0.1:$port/metrics" >/dev/null || true
        curl -s -m 10 -H 'Accept: application/openmetrics-text' "127.0.0.1:$port/metrics" >/dev/null || true
        curl -s -m 5 "127.0.0.1:$port/health" >/dev/null || true
        sleep 2
    done
    wait "$run" || true
    [ -s "$work/$backend.out" ] || { echo "symbol-order.sh: no profile for $backend" >&2; cat "$work/$backend.log" >&2; exit 1; }
done
# Callgrind names a function once, `fn=(id) name`, then by id; keep those whose object
# (`ob=`) is the exporter. Names without a symbol (`0x...`) and callgrind's own are dropped,
# as is a recursion suffix ('2).
awk '
    match($0, /^c?ob=\([0-9]+\)/) {
        id = substr($0, 1, RLENGTH); sub(/^c?ob=/, "", id)
        if (length($0) > RLENGTH) ob[id] = substr($0, RLENGTH + 2)
        if ($0 ~ /^ob=/) cur = ob[id]
        next
    }
    match($0, /^c?fn=\([0-9]+\)/) {
        id = substr($0, 1, RLENGTH); sub(/^c?fn=/, "", id)
        if (length($0) > RLENGTH) fn[id] = substr($0, RLENGTH + 2)
        if ($0 ~ /^fn=/ && cur ~ /\/dcgm-exporter$/) {
            name = fn[id]; sub(/\047.*$/, "", name)
            if (name !~ /^(0x|\()/) print name
        }
    }
' "$work"/*.out | LC_ALL=C sort -u > etc/symbol-order.txt
echo "etc/symbol-order.txt: $(wc -l < etc/symbol-order.txt) functions"
