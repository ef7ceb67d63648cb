#!/usr/bin/env python3
"""Generates the DCGM field table of dcgm-sys from NVIDIA's DCGM sources.

Generated from DCGM 4.6.0 (github.com/NVIDIA/DCGM, commit 72fa3fe). To regenerate:

    python3 dcgm-sys/fields/gen_fields.py --git-dir <clone of NVIDIA/DCGM> --rev 72fa3fe
    python3 dcgm-sys/fields/gen_fields.py <DCGM checkout dir>

Reads dcgmlib/dcgm_fields.h (ids and deprecated aliases), dcgmlib/src/dcgm_fields.cpp
(type, size, tag, scope, NVML id, entity level, dmon short name/unit/width) and
dcgmlib/dcgm_errors.h (health error codes), and writes, next to this script:

  fields-4.6.0.csv   id,name,type,size,tag,scope,nvml_field_id,entity_level,short_name,unit,width
  aliases-4.6.0.csv  alias,name  (deprecated DCGM names, then dcgm-exporter 1.x names)
  health-codes-4.6.0.csv  code,name  (dcgmError_t, DCGM_FR_*)

The 1.x lowercase names (dcgm_gpu_temp, ...) that dcgm-exporter still accepts are listed
in LEGACY_NAMES below with the field id they stand for.
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Range markers in dcgm_fields.h that are not fields.
MARKERS = {
    "DCGM_FI_UNKNOWN", "DCGM_FI_SYSTEM_FIELD_UNKNOWN", "DCGM_FI_FIRST_VGPU_FIELD_ID", "DCGM_FI_LAST_VGPU_FIELD_ID",
    "DCGM_FI_INTERNAL_FIELDS_0_START", "DCGM_FI_INTERNAL_FIELDS_0_END",
    "DCGM_FI_FIRST_NVSWITCH_FIELD_ID", "DCGM_FI_LAST_NVSWITCH_FIELD_ID",
    "DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID", "DCGM_FI_DEV_LAST_CONNECTX_FIELD_ID", "DCGM_FI_MAX_FIELDS",
}

ENTITY = {"DCGM_FE_NONE": 0, "DCGM_FE_GPU": 1, "DCGM_FE_VGPU": 2, "DCGM_FE_SWITCH": 3, "DCGM_FE_GPU_I": 4,
          "DCGM_FE_GPU_CI": 5, "DCGM_FE_LINK": 6, "DCGM_FE_CPU": 7, "DCGM_FE_CPU_CORE": 8, "DCGM_FE_CONNECTX": 9}
TYPES = {"DCGM_FT_BINARY": "b", "DCGM_FT_DOUBLE": "d", "DCGM_FT_INT64": "i", "DCGM_FT_STRING": "s",
         "DCGM_FT_TIMESTAMP": "t"}
SCOPES = {"DCGM_FS_GLOBAL": 0, "DCGM_FS_ENTITY": 1, "DCGM_FS_DEVICE": 1}
UNITS = {"DCGM_FIELD_UNIT_TEMP_C": " C", "DCGM_FIELD_UNIT_POW_W": " W", "DCGM_FIELD_UNIT_BW_KBPS": "KB/s",
         "DCGM_FIELD_UNIT_BW_MBPS": "MB/s", "DCGM_FIELD_UNIT_BW_MbPS": "Mb/s",
         "DCGM_FIELD_UNIT_MILLIJOULES": " mJ"}

# dcgm-exporter 1.x metric names (go-dcgm pkg/dcgm/legacy_fields.csv), by DCGM field id.
LEGACY_NAMES = {
    "dcgm_sm_clock": 100, "dcgm_memory_clock": 101, "dcgm_memory_temp": 140, "dcgm_gpu_temp": 150,
    "dcgm_power_usage": 155, "dcgm_total_energy_consumption": 156, "dcgm_pcie_tx_throughput": 200,
    "dcgm_pcie_rx_throughput": 201, "dcgm_pcie_replay_counter": 202, "dcgm_gpu_utilization": 203,
    "dcgm_mem_copy_utilization": 204, "dcgm_enc_utilization": 206, "dcgm_dec_utilization": 207,
    "dcgm_xid_errors": 230, "dcgm_power_violation": 240, "dcgm_thermal_violation": 241,
    "dcgm_sync_boost_violation": 242, "dcgm_board_limit_violation": 243, "dcgm_low_util_violation": 244,
    "dcgm_reliability_violation": 245, "dcgm_fb_free": 251, "dcgm_fb_used": 252,
    "dcgm_ecc_sbe_volatile_total": 310, "dcgm_ecc_dbe_volatile_total": 311,
    "dcgm_ecc_sbe_aggregate_total": 312, "dcgm_ecc_dbe_aggregate_total": 313, "dcgm_retired_pages_sbe": 390,
    "dcgm_retired_pages_dbe": 391, "dcgm_retired_pages_pending": 392,
    "dcgm_nvlink_flit_crc_error_count_total": 409, "dcgm_nvlink_data_crc_error_count_total": 419,
    "dcgm_nvlink_replay_error_count_total": 429, "dcgm_nvlink_recovery_error_count_total": 439,
    "dcgm_nvlink_bandwidth_total": 449, "dcgm_fi_prof_gr_engine_active": 1001, "dcgm_fi_prof_sm_active": 1002,
    "dcgm_fi_prof_sm_occupancy": 1003, "dcgm_fi_prof_pipe_tensor_active": 1004, "dcgm_fi_prof_dram_active": 1005,
    "dcgm_fi_prof_pcie_tx_bytes": 1009, "dcgm_fi_prof_pcie_rx_bytes": 1010,
}


def read_sources(args):
    paths = ["dcgmlib/dcgm_fields.h", "dcgmlib/src/dcgm_fields.cpp", "dcgmlib/dcgm_errors.h"]
    out = []
    for p in paths:
        if args.git_dir:
            out.append(subprocess.run(["git", "-C", args.git_dir, "show", f"{args.rev}:{p}"], check=True,
                                      capture_output=True, text=True).stdout)
        else:
            with open(os.path.join(args.checkout, p), encoding="utf-8") as f:
                out.append(f.read())
    return out


def split_args(s):
    parts, depth, cur, quote = [], 0, "", False
    for ch in s:
        if ch == '"':
            quote = not quote
        if not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def unquote(s):
    m = re.fullmatch(r'"(.*)"', s.strip())
    return m.group(1) if m else s.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", nargs="?")
    ap.add_argument("--git-dir")
    ap.add_argument("--rev", default="HEAD")
    args = ap.parse_args()
    if not args.checkout and not args.git_dir:
        ap.error("give a DCGM checkout directory or --git-dir")
    header, cpp, errors = read_sources(args)
    cpp = re.sub(r"/\*.*?\*/", "", cpp, flags=re.S)
    cpp = re.sub(r"^\s*//.*$", "", cpp, flags=re.M)

    ids = {}
    for m in re.finditer(r"^#define\s+(DCGM_FI_\w+)\s+(\d+)\b", header, re.M):
        if m.group(1) not in MARKERS:
            ids[m.group(1)] = int(m.group(2))
    aliases = {}
    for m in re.finditer(r"^#define\s+(DCGM_FI_\w+)\s+(DCGM_FI_\w+)", header, re.M):
        aliases[m.group(1)] = m.group(2)

    def resolve(n):
        seen = set()
        while n in aliases and n not in seen:
            seen.add(n)
            n = aliases[n]
        return n

    meta = {}
    for m in re.finditer(r"DcgmFieldsPopulateOneFieldWithFormatting\((DCGM_FI_\w+.*?)\);", cpp, re.S):
        a = split_args(m.group(1))
        if len(a) != 10:
            sys.exit(f"unexpected call shape: {a}")
        name = resolve(a[0])
        if name not in ids:
            # DCGM-internal fields (dcgm_fields_internal.hpp: 210, 211, 220, 221) are not
            # part of the public table.
            continue
        unit = a[7]
        um = re.search(r"getTextForEnum\((\w+)\)", unit)
        unit = UNITS.get(um.group(1), "") if um else unquote(unit)
        wm = re.search(r"DCGM_FIELD_WIDTH_(\d+)", a[9])
        # One call in 4.6.0 passes DCGM_FE_GPU (numerically 1 = DCGM_FS_DEVICE) as scope.
        scope = SCOPES.get(a[4], ENTITY.get(a[4]))
        if scope is None:
            sys.exit(f"bad scope in {a}")
        meta[ids[name]] = dict(type=TYPES[a[1]], size=int(a[2]) if a[2].isdigit() else 8, tag=unquote(a[3]), scope=scope,
                               nvml=a[5], short=unquote(a[6]), unit=unit, entity=ENTITY[a[8]],
                               width=int(wm.group(1)) if wm else 10)
    # Loops in dcgm_fields.cpp: NVDEC/NVJPG utilisation and per-link NVLink DCP bytes.
    for base, prefix, short in [("DCGM_FI_PROF_NVDEC_UTIL_0_RATIO", "nvdec", "NVDEC"),
                                ("DCGM_FI_PROF_NVJPG_UTIL_0_RATIO", "nvjpg", "NVJPG")]:
        for n in range(8):
            meta[ids[base] + n] = dict(type="d", size=0, tag=f"{prefix}{n}_active", scope=1, nvml="0",
                                       short=f"{short}{n}", unit="", entity=1, width=5)
    first = ids["DCGM_FI_PROF_NVLINK_L0_TX_BYTES"]
    for fid in range(first, ids["DCGM_FI_PROF_NVLINK_L17_RX_BYTES"] + 1):
        link, rx = (fid - first) // 2, (fid - first) & 1
        meta[fid] = dict(type="i", size=0, tag=f"nvlink_l{link}_{'rx' if rx else 'tx'}_bytes", scope=1, nvml="0",
                         short=f"NVL{link}{'R' if rx else 'T'}", unit="", entity=1, width=20)

    missing = sorted(n for n, i in ids.items() if i not in meta)
    # A define with no metadata call is unknown to the real library too (DcgmFieldGetById
    # returns NULL), so it is left out.
    for n in missing:
        print(f"note: {n} ({ids[n]}) has no metadata in dcgm_fields.cpp; left out", file=sys.stderr)
    by_id = {}
    for n, i in ids.items():
        if i not in meta:
            continue
        by_id.setdefault(i, n)

    def nvml_id(s):
        return s if re.fullmatch(r"-?\d+", s) else "0"

    with open(os.path.join(HERE, "fields-4.6.0.csv"), "w", encoding="utf-8") as f:
        f.write("id,name,type,size,tag,scope,nvml_field_id,entity_level,short_name,unit,width\n")
        for i in sorted(by_id):
            m = meta[i]
            row = [str(i), by_id[i], m["type"], str(m["size"]), m["tag"], str(m["scope"]), nvml_id(m["nvml"]),
                   str(m["entity"]), m["short"], m["unit"], str(m["width"])]
            if any("," in c or "\n" in c for c in row):
                sys.exit(f"a field of {row} contains a comma")
            f.write(",".join(row) + "\n")
    with open(os.path.join(HERE, "aliases-4.6.0.csv"), "w", encoding="utf-8") as f:
        f.write("alias,name\n")
        for a in sorted(aliases):
            target = resolve(a)
            if target in ids:
                f.write(f"{a},{target}\n")
        for a, i in sorted(LEGACY_NAMES.items()):
            f.write(f"{a},{by_id[i]}\n")
    with open(os.path.join(HERE, "health-codes-4.6.0.csv"), "w", encoding="utf-8") as f:
        f.write("code,name\n")
        for m in re.finditer(r"^\s*(DCGM_FR_\w+)\s*=\s*(\d+)\s*,", errors, re.M):
            f.write(f"{m.group(2)},{m.group(1)}\n")
    print(f"{len(by_id)} fields, {len(aliases)} aliases, {len(LEGACY_NAMES)} legacy names")


if __name__ == "__main__":
    main()
