#!/usr/bin/env bash
# Memory as users see it (issue 44): VmRSS and VmHWM of the exporter (and of the host
# engine in remote mode) after a run, for each way of running it on one node:
#
#   real DCGM 4.6 embedded, GPUs DCGM samples through GPM (Hopper+), default counters
#   real DCGM 4.6 embedded, GPUs without GPM, default counters
#   the same with --dcgm-denylist-modules profiling
#   the same with the profiling rows removed from the counters
#   real DCGM 4.6 remote: the exporter, and nv-hostengine beside it
#   the NVML backend (--backend nvml) on the simulated NVML
#   the simulator (dcgm-sim) embedded
#
# The real DCGM is the kit in ../shared/dcgm-real (DCGM 4.6.0 built from source, -O1, over
# DCGM's NVML injection library: no GPU needed; its profiling module is closed source and
# absent, so "without GPM" shows the module's load failing, not its memory: NVIDIA's
# figures for that are in bench/README.md). GPUs are injected H100 80GB HBM3 from
# ../shared/dcgm-real/gen_h100_yaml.py; "GPM" adds QueryDeviceSupport {isSupportedDevice: 1}
# and GpmMetrics, as a recorded H200 has them.
#
# Usage: bench/memory.sh [GPUS] [SECONDS] [INTERVAL_MS]   (defaults 8, 40, 1000)
# Needs: a release build (cargo build --release -p dcgm-exporter -p dcgm-sim -p nvml-sim),
# the kit unpacked in target/real-dcgm/dcgm-4.6.0 (cargo test --test it -- real_dcgm:: does it) and
# its runtime packages (../shared/dcgm-real/README.md). Prints one table row per run.
set -euo pipefail
cd "$(dirname "$0")/.."
GPUS=${1:-8}
SECONDS_RUN=${2:-40}
INTERVAL=${3:-1000}
REL=$(cd "${REL:-target/release}" && pwd)
KIT=$(cd "${DCGM_REAL_DIR:-target/real-dcgm/dcgm-4.6.0}" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PORT=$((20000 + RANDOM % 20000))

python3 ../shared/dcgm-real/gen_h100_yaml.py "$GPUS" > "$WORK/plain.yaml"
python3 - "$WORK/plain.yaml" "$WORK/gpm.yaml" <<'EOF'
import sys
# NVML GPM metric id -> value: graphics 42 %, SM 40 %, occupancy 30 %, any tensor 12 %,
# DRAM 25 %, PCIe TX 100 and RX 200 MiB/s.
gpm = {1: 42.0, 2: 40.0, 3: 30.0, 5: 12.0, 10: 25.0, 20: 100.0, 21: 200.0}
block = "    GpmMetrics:\n      FunctionReturn: 0\n      ReturnValue:\n" + "".join(
    f"        {k}: {{FunctionReturn: 0, ReturnValue: {{value: {v}}}}}\n" for k, v in gpm.items())
out = []
for line in open(sys.argv[1]).read().splitlines(True):
    out.append(line.replace("isSupportedDevice: 0", "isSupportedDevice: 1"))
    if "isSupportedDevice" in line:
        out.append(block)
open(sys.argv[2], "w").write("".join(out))
EOF
grep -v '^DCGM_FI_PROF_' etc/default-counters.csv > "$WORK/no-prof.csv"

# kB of VmRSS and VmHWM of a pid.
mem() { awk '/^VmRSS|^VmHWM/ {v[$1]=$2} END {printf "%.1f %.1f", v["VmRSS:"]/1024, v["VmHWM:"]/1024}' "/proc/$1/status"; }

row() { printf '| %-58s | %8s | %8s | %s\n' "$1" "$2" "$3" "$4"; }

# run NAME PAGE_NEEDLE ENV... -- ARGS...: starts the exporter, waits for a page holding
# PAGE_NEEDLE, lets it run SECONDS_RUN, prints its RSS and peak.
run() {
  local name=$1 needle=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local port=$((PORT++))
  env -i PATH="$PATH" HOME="$HOME" "${envs[@]}" "$REL/dcgm-exporter" -a ":$port" -c "$INTERVAL" "$@" \
    > "$WORK/out" 2> "$WORK/err" &
  local pid=$! t=0
  until curl -sf "localhost:$port/metrics" 2>/dev/null | grep -q "^$needle{"; do
    sleep 0.5; t=$((t + 1))
    if [ $t -gt 120 ] || ! kill -0 $pid 2>/dev/null; then
      echo "$name: no page with $needle" >&2; tail -5 "$WORK/err" >&2; kill $pid 2>/dev/null || true; return 1
    fi
  done
  sleep "$SECONDS_RUN"
  local series
  series=$(curl -sf "localhost:$port/metrics" | grep -c '^DCGM_FI_' || true)
  read -r rss hwm <<< "$(mem $pid)"
  row "$name" "$rss" "$hwm" "$series DCGM series"
  kill $pid; wait $pid 2>/dev/null || true
}

kit_env=(NVML_INJECTION_MODE=True LD_LIBRARY_PATH="$KIT/lib")
real=(--dcgm-library "$KIT/lib/libdcgm.so.4")

echo "$GPUS injected H100s, $SECONDS_RUN s at -c $INTERVAL; MiB"
row "run" "VmRSS" "VmHWM" "page"
run "real DCGM 4.6 embedded, GPM GPUs, default counters" DCGM_FI_PROF_GR_ENGINE_ACTIVE \
  "${kit_env[@]}" NVML_YAML_FILE="$WORK/gpm.yaml" -- "${real[@]}" -f etc/default-counters.csv
run "real DCGM 4.6 embedded, no GPM, default counters" DCGM_FI_DEV_GPU_TEMP \
  "${kit_env[@]}" NVML_YAML_FILE="$WORK/plain.yaml" -- "${real[@]}" -f etc/default-counters.csv
run "real DCGM 4.6 embedded, no GPM, --dcgm-denylist-modules profiling" DCGM_FI_DEV_GPU_TEMP \
  "${kit_env[@]}" NVML_YAML_FILE="$WORK/plain.yaml" -- "${real[@]}" -f etc/default-counters.csv \
  --dcgm-denylist-modules profiling
run "real DCGM 4.6 embedded, no GPM, profiling rows removed" DCGM_FI_DEV_GPU_TEMP \
  "${kit_env[@]}" NVML_YAML_FILE="$WORK/plain.yaml" -- "${real[@]}" -f "$WORK/no-prof.csv"

# Remote: the real nv-hostengine over the GPM YAML, and the exporter connected to it.
he_port=$((PORT++))
env -i PATH="$PATH" HOME="$HOME" "${kit_env[@]}" NVML_YAML_FILE="$WORK/gpm.yaml" \
  "$KIT/bin/nv-hostengine" -n -p "$he_port" -b 127.0.0.1 --log-level ERROR -f "$WORK/he.log" \
  --home-dir "$WORK" --pid "$WORK/he.pid" > /dev/null 2>&1 &
he=$!
sleep 3
run "real DCGM 4.6 remote (-r), GPM GPUs: the exporter" DCGM_FI_PROF_GR_ENGINE_ACTIVE \
  LD_LIBRARY_PATH="$KIT/lib" -- "${real[@]}" -r "127.0.0.1:$he_port" -f etc/default-counters.csv
read -r rss hwm <<< "$(mem $he)"
row "real DCGM 4.6 remote: nv-hostengine beside it" "$rss" "$hwm" "(the engine's own process)"
kill $he; wait $he 2>/dev/null || true

run "NVML backend (--backend nvml, nvml-sim)" DCGM_FI_DEV_GPU_TEMP \
  LD_LIBRARY_PATH="$REL" DCGM_SIM_PROFILE="$PWD/etc/sim/h100-8gpu-nvswitch.toml" -- \
  --backend nvml --nvml-library "$REL/libnvidia-ml.so.1" -f etc/default-counters.csv
run "simulator (dcgm-sim) embedded, 8 GPUs + NvSwitches" DCGM_FI_PROF_GR_ENGINE_ACTIVE \
  LD_LIBRARY_PATH="$REL" DCGM_SIM_PROFILE="$PWD/etc/sim/h100-8gpu-nvswitch.toml" -- \
  --dcgm-library "$REL/libdcgm.so.4" -f etc/default-counters.csv
