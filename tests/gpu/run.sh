#!/usr/bin/env bash
# The GPU tier: the exporter on NVIDIA's real DCGM 4.6 (the kit's nv-hostengine and
# libdcgm.so.4), embedded and remote, and on NVML alone (--backend nvml), every exported GPU
# value compared with an independent reference (tests/gpu/gpu_tier.py has the field mapping
# and the tolerances).
#
#   gpu mode (an NVIDIA driver is here): DCGM on the driver's own NVML; reference
#     `nvidia-smi --query-gpu=...`; then DCGM's nvml_api_recorder.py records the GPU's whole
#     NVML state into an injection YAML (--out DIR/nvml-recorded.yaml), which is replayed
#     at once in kit mode to prove it loads. Commit that YAML under tests/gpu/recorded/ for CI.
#   kit mode (no GPU, or --mode kit): DCGM on its NVML injection library over --yaml; the
#     reference is `dcgmi discovery -l` and `dcgmi dmon` standing in for nvidia-smi. CI runs
#     this (tests/it/gpu_tier.rs).
#
# It never changes GPU settings: no MIG, clock, power, persistence or any other change.
# nvidia-smi is only ever run with --query-gpu (see `smi` below), dcgmi only with
# discovery/dmon, the exporter and DCGM only watch fields, and the recorder is refused if
# its source names an NVML setter other than in its list of functions it never calls.
#
# Usage: tests/gpu/run.sh [--mode auto|gpu|kit] [--yaml FILE] [--kit DIR] [--exporter BIN]
#                         [--out DIR] [--reference CSV] [--recorder DIR] [--no-record]
#   --kit DIR        the unpacked kit (bin/nv-hostengine, lib/libdcgm.so.4); default
#                    $DCGM_REAL_DIR, else ../shared/dcgm-real/*.tar.xz unpacked in a temp dir
#   --exporter BIN   default target/debug/dcgm-exporter (cargo build first)
#   --yaml FILE      kit mode's NVML injection YAML; default tests/gpu/recorded/*.yaml
#   --reference CSV  compare against this nvidia-smi-shaped CSV instead of asking
#                    (index,uuid,<the mapping's properties>; `gpu_tier.py smi-query`)
#   --recorder DIR   DCGM's testing/python3 (nvml_api_recorder.py, dcgm_nvml.py,
#                    nvml_injection_structs.py...); default $DCGM_TESTING_PY
#   --no-record      gpu mode without recording
# Exit: 0 every value matched; 1 a mismatch (listed); 2 it could not run (says why).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/tests/gpu"
tier() { python3 "$here/gpu_tier.py" "$@"; }
fail() { echo "gpu-tier: $*" >&2; exit 2; }

mode=auto yaml= kit=${DCGM_REAL_DIR:-} exporter="$repo/target/debug/dcgm-exporter" out=
reference= recorder=${DCGM_TESTING_PY:-} record=1
while [ $# -gt 0 ]; do
  case "$1" in
    --mode) mode=$2; shift 2 ;;
    --yaml) yaml=$2; shift 2 ;;
    --kit) kit=$2; shift 2 ;;
    --exporter) exporter=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reference) reference=$2; shift 2 ;;
    --recorder) recorder=$2; shift 2 ;;
    --no-record) record=; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown argument '$1' (--help lists them)" ;;
  esac
done
command -v python3 >/dev/null || fail "python3 is needed"

# The only way nvidia-smi is run: queries, never a setting.
smi() {
  case "$1" in --query-gpu=*) ;; *) fail "refusing 'nvidia-smi $*': queries only" ;; esac
  nvidia-smi "$1" --format=csv,noheader,nounits
}

if [ "$mode" = auto ]; then
  if command -v nvidia-smi >/dev/null && smi --query-gpu=uuid >/dev/null 2>&1; then
    mode=gpu
  else
    mode=kit
  fi
fi
case "$mode" in gpu|kit) ;; *) fail "--mode is auto, gpu or kit, not '$mode'" ;; esac

# Before anything runs on a GPU: the recorder is here and reads only.
if [ "$mode" = gpu ] && [ -n "$record" ]; then
  hint="DCGM's recorder is not here. Provide DCGM's testing/python3 directory (github.com/NVIDIA/DCGM, \
tag v4.6.0: nvml_api_recorder.py with dcgm_nvml.py, nvml_injection_structs.py and the modules they \
import beside it; not committed here, it is fetched code) as --recorder DIR or DCGM_TESTING_PY=DIR, \
with PyYAML installed; or pass --no-record"
  [ -n "$recorder" ] && [ -f "$recorder/nvml_api_recorder.py" ] && [ -f "$recorder/dcgm_nvml.py" ] ||
    fail "$hint"
  python3 -c 'import yaml' 2>/dev/null || fail "the recorder needs PyYAML (pip install pyyaml)"
  # Read-only or refused: an NVML setter the recorder could call stops the run.
  tier check-recorder "$recorder/nvml_api_recorder.py" || exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-tier.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
out=${out:-$work/out}
mkdir -p "$out"

if [ -z "$kit" ]; then
  archive="$repo/../shared/dcgm-real/dcgm-4.6.0-nvml-injection-linux-x86_64.tar.xz"
  [ -f "$archive" ] || fail "no kit: pass --kit DIR or set DCGM_REAL_DIR (or put the archive at $archive)"
  tar -xJf "$archive" -C "$work" || fail "could not unpack $archive"
  kit="$work/dcgm-4.6.0"
fi
for f in bin/nv-hostengine bin/dcgmi lib/libdcgm.so.4; do
  [ -e "$kit/$f" ] || fail "$kit/$f is missing (is --kit the unpacked dcgm-4.6.0 directory?)"
done
[ -x "$exporter" ] || fail "$exporter is missing: cargo build, or pass --exporter BIN"

# A clean environment for everything started here: a caller's NVML_* or DCGM_EXPORTER_*
# variables must not decide what is measured.
base_env=(env -i "PATH=$PATH" "HOME=${HOME:-/}" "TMPDIR=${TMPDIR:-/tmp}" "LD_LIBRARY_PATH=$kit/lib")
if [ "$mode" = kit ]; then
  if [ -z "$yaml" ]; then
    yaml=$(find "$here/recorded" -name '*.yaml' 2>/dev/null | sort | head -n 1)
    [ -n "$yaml" ] || fail "kit mode needs --yaml FILE (no tests/gpu/recorded/*.yaml yet)"
  fi
  [ -f "$yaml" ] || fail "$yaml does not exist"
  yaml=$(cd "$(dirname "$yaml")" && pwd)/$(basename "$yaml")
  dcgm_env=("${base_env[@]}" NVML_INJECTION_MODE=True "NVML_YAML_FILE=$yaml")
else
  # The driver's libnvidia-ml.so.1: the kit's lib/ holds only the injection library, which
  # DCGM loads only with NVML_INJECTION_MODE set.
  dcgm_env=("${base_env[@]}")
fi
echo "gpu-tier: $mode mode, kit $kit${yaml:+, YAML $yaml}"

he_port=$(tier free-port)
"${dcgm_env[@]}" "$kit/bin/nv-hostengine" -n -p "$he_port" -b 127.0.0.1 \
  --pid "$work/he.pid" --home-dir "$work" --log-level WARN -f "$out/nv-hostengine.log" \
  >"$work/he.out" 2>&1 &
pids+=($!)
tier wait-port "$he_port" || fail "nv-hostengine did not start: $(tail -n 5 "$out/nv-hostengine.log" 2>/dev/null)"

# The reference, taken right after each scrape (a real GPU's values move).
take_reference() { # file
  if [ -n "$reference" ]; then
    cp "$reference" "$1"
  elif [ "$mode" = gpu ]; then
    smi "--query-gpu=$(tier smi-query)" >"$1" || fail "nvidia-smi --query-gpu failed"
  else
    "${dcgm_env[@]}" "$kit/bin/dcgmi" discovery --host "127.0.0.1:$he_port" -l \
      >"$work/discovery.txt" 2>&1 || fail "dcgmi discovery -l failed: $(cat "$work/discovery.txt")"
    "${dcgm_env[@]}" "$kit/bin/dcgmi" dmon --host "127.0.0.1:$he_port" \
      -e "$(tier dmon-fields)" -c 1 >"$work/dmon.txt" 2>&1 ||
      fail "dcgmi dmon failed: $(cat "$work/dmon.txt")"
    tier from-dcgmi "$work/discovery.txt" "$work/dmon.txt" >"$1"
  fi
}

take_reference "$out/reference-start.csv"
gpus=$(grep -c . "$out/reference-start.csv" || true)
[ "$gpus" -gt 0 ] || fail "the reference names no GPU"

status=0
for how in embedded remote nvml; do
  port=$(tier free-port)
  args=(-f "$here/counters.csv" -a "127.0.0.1:$port" -c 1000 --dcgm-library "$kit/lib/libdcgm.so.4")
  if [ "$how" = remote ]; then
    args+=(-r "127.0.0.1:$he_port")
    env_run=("${base_env[@]}")
  elif [ "$how" = nvml ]; then
    # The NVML backend (no libdcgm): the driver's NVML, or the injection library over the
    # same YAML in kit mode.
    args=(-f "$here/counters.csv" -a "127.0.0.1:$port" -c 1000 --backend nvml)
    [ "$mode" = kit ] && args+=(--nvml-library "$kit/lib/libnvml_injection.so.1")
    env_run=("${dcgm_env[@]}")
  else
    env_run=("${dcgm_env[@]}")
  fi
  "${env_run[@]}" "$exporter" "${args[@]}" >"$out/exporter-$how.log" 2>&1 &
  exporter_pid=$!
  pids+=("$exporter_pid")
  tier wait-scrape "http://127.0.0.1:$port/metrics" "$here/counters.csv" "$gpus" \
    "$out/metrics-$how.prom" ||
    fail "$how exporter: no complete page; its log: $(tail -n 5 "$out/exporter-$how.log")"
  take_reference "$out/reference-$how.csv"
  tier compare "$how" "$out/metrics-$how.prom" "$out/reference-$how.csv" "$here/counters.csv" ||
    status=1
  kill "$exporter_pid" 2>/dev/null || true
  wait "$exporter_pid" 2>/dev/null || true
done

if [ "$mode" = gpu ] && [ -n "$record" ]; then
  mkdir -p "$work/rec"
  (cd "$work/rec" && env -i "PATH=$PATH" "HOME=${HOME:-/}" "PYTHONPATH=$recorder" \
    python3 "$recorder/nvml_api_recorder.py") >"$out/recorder.log" 2>&1 ||
    fail "nvml_api_recorder.py failed: $(tail -n 5 "$out/recorder.log")"
  [ -s "$work/rec/out.yaml" ] || fail "nvml_api_recorder.py wrote no out.yaml"
  cp "$work/rec/out.yaml" "$out/nvml-recorded.yaml"
  echo "gpu-tier: recorded the NVML state into $out/nvml-recorded.yaml; replaying it in kit mode"
  "$0" --mode kit --yaml "$out/nvml-recorded.yaml" --kit "$kit" --exporter "$exporter" \
    --out "$out/replay" || status=1
fi

[ "$status" = 0 ] && echo "gpu-tier: $mode mode: every value matched (results in $out)"
exit "$status"
