#!/usr/bin/env bash
# Instructions per collection with and without sub-interval aggregation (issue 47's cost
# target): power, GPU temperature and SM clock aggregated every 100 ms on the simulated
# 8-GPU node, counted by callgrind over the whole exporter process (the simulators run
# inside it, as an embedded engine or the driver would) over COLLECTIONS collections, for
# the DCGM and the NVML backend. `bench aggregate` measures CPU time, which a busy 2-core
# machine moves by more than the difference; this count does not move with the load (it
# does not see the kernel, cache misses or cores contending). "Exporter alone" leaves out
# the simulator's share (its calls, and the callbacks it makes back, inclusive): the work a
# real engine or driver does in its own threads or the kernel. Needs valgrind and curl.
#
#   bench/aggregate-instructions.sh [COLLECTIONS]    # default 20
#   SOURCES=nvml bench/aggregate-instructions.sh      # one backend (dcgm, nvml)
#   KEEP=DIR bench/aggregate-instructions.sh          # keep callgrind's files in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
fields=DCGM_FI_DEV_POWER_USAGE,DCGM_FI_DEV_GPU_TEMP,DCGM_FI_DEV_SM_CLOCK
for tool in valgrind callgrind_control curl; do
    command -v "$tool" >/dev/null || { echo "aggregate-instructions.sh: $tool is not installed" >&2; exit 1; }
done
cargo build -q --release -p dcgm-exporter
cargo build -q --release -p dcgm-sim -p nvml-sim
dir=$PWD/target/release
work=${KEEP:-$(mktemp -d)}; mkdir -p "$work"
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# Successful collections so far (0 while the exporter does not answer).
collections() {
    curl -sf -m 30 "http://$1/metrics" 2>/dev/null |
        awk '/^dcgm_exporter_collections_total\{result="success"\}/ {n = $2} END {print n + 0}'
}

# Waits until the exporter at $1 has made $2 collections, for at most three minutes,
# asking every $3 seconds (default 0.2): each question is a scrape, which callgrind counts.
wait_for() {
    local t=0 step=${3:-0.2}
    while [ "$(collections "$1")" -lt "$2" ]; do
        t=$(awk -v t="$t" -v s="$step" 'BEGIN {print t + s}')
        awk -v t="$t" 'BEGIN {exit !(t <= 180)}' ||
            { echo "aggregate-instructions.sh: $1 made no $2 collections in 3 minutes" >&2; exit 1; }
        sleep "$step"
    done
}

# Instructions of calls from the exporter's own code into the simulator library (the
# engine or driver it stands for, with the callbacks it makes back), from callgrind file $1.
engine() {
    awk '
        function obj(line,   id, rest) {
            id = line; sub(/^c?ob=\(/, "", id); sub(/\).*/, "", id)
            rest = line; if (sub(/^c?ob=\([0-9]+\) /, "", rest)) names[id] = rest
            return names[id]
        }
        /^ob=/ { ob = obj($0); next }
        /^fn=/ { fob = ob; cob = ""; next }
        /^cob=/ { cob = obj($0); next }
        /^calls=/ { pending = 1; next }
        /^[0-9+*-]/ {
            if (pending) {
                callee = cob != "" ? cob : fob
                if (fob ~ /dcgm-exporter$/ && callee ~ /_sim\.so$/) sum += $2
                pending = 0; cob = ""
            }
        }
        END { print sum + 0 }
    ' "$1"
}

# Runs the exporter under callgrind with "$@", waits for its page and three collections,
# then counts $n collections; prints instructions per collection.
count() {
    local tag=$1; shift
    local port=$((19900 + RANDOM % 300))
    local addr=127.0.0.1:$port
    DCGM_SIM_PROFILE=etc/sim/h100-8gpu-nvswitch.toml \
        valgrind --tool=callgrind --callgrind-out-file="$work/$tag.out" \
        "$dir/dcgm-exporter" -f etc/default-counters.csv -a "$addr" -c 1000 "$@" \
        >"$work/$tag.stdout" 2>"$work/$tag.log" &
    local pid=$!
    local t=0
    until curl -sf -m 30 "http://$addr/metrics" 2>/dev/null | grep -q '^DCGM_FI_DEV_GPU_TEMP{'; do
        t=$((t + 1))
        [ "$t" -le 180 ] || { echo "aggregate-instructions.sh: $tag: no GPU series on $addr in 3 minutes" >&2; exit 1; }
        sleep 1
    done
    local c0
    c0=$(collections "$addr")
    wait_for "$addr" $((c0 + 3))
    callgrind_control -z "$pid" >/dev/null 2>&1
    c0=$(collections "$addr")
    # Asked rarely: a scrape every 0.2 s would add a tenth to what is counted.
    wait_for "$addr" $((c0 + n)) 5
    local c1
    c1=$(collections "$addr")
    callgrind_control -d "$pid" >/dev/null 2>&1
    curl -sf -m 30 "http://$addr/metrics" >"$work/$tag.page"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    local total sim
    total=$(awk '/^summary:/ {s += $2} END {print s}' "$work/$tag.out".*)
    sim=$(engine "$work/$tag.out".1)
    echo "$((total / (c1 - c0))) $((sim / (c1 - c0)))"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
printf '%-6s %14s %14s %7s %18s   %s\n' source "off instr/coll" "on instr/coll" "on/off" "per field" \
    "exporter alone: off -> on (on/off)"
for source in ${SOURCES:-dcgm nvml}; do
    if [ "$source" = dcgm ]; then
        lib=(--backend dcgm --dcgm-library "$dir/libdcgm.so.4")
    else
        lib=(--backend nvml --nvml-library "$dir/libnvidia-ml.so.1")
    fi
    read -r off off_sim < <(count "$source-off" "${lib[@]}")
    read -r on on_sim < <(count "$source-on" "${lib[@]}" --aggregate "$fields" --aggregate-period 100ms)
    # The fields aggregated on this backend (NVML keeps no samples of the temperature).
    nfields=$(grep -c '^# TYPE .*_interval_max gauge' "$work/$source-on.page")
    printf '%-6s %14s %14s %7s %18s   %s -> %s (%s)\n' "$source" "$off" "$on" "$(ratio "$on" "$off")" \
        "$(awk -v a="$on" -v b="$off" -v n="$nfields" 'BEGIN {printf "%d (%+.1f %%)", (a - b) / n, (a / b - 1) * 100 / n}')" \
        $((off - off_sim)) $((on - on_sim)) "$(ratio $((on - on_sim)) $((off - off_sim)))"
done
