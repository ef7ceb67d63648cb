#!/usr/bin/env python3
"""Helpers of tests/gpu/run.sh: the field mapping, the reference in nvidia-smi's CSV shape,
waiting for the exporter, and the comparison. Standard library only.

The mapping (one row per field of tests/gpu/counters.csv; run.sh fails on a field that has
none): exporter series, nvidia-smi --query-gpu property, DCGM field id (what `dcgmi dmon -e`
reads in kit mode), how it is compared.
"""

import ast
import csv
import io
import re
import socket
import sys
import time
import urllib.request

# (series, nvidia-smi property, DCGM field id, kind, tolerance)
#   abs: |exported - reference| <= tolerance (units of the field)
#   rel: |exported - reference| <= tolerance * |reference|
#   exact: equal
MAPPING = [
    ("DCGM_FI_DEV_GPU_TEMP", "temperature.gpu", 150, "abs", 2.0),  # C
    ("DCGM_FI_DEV_POWER_USAGE", "power.draw", 155, "rel", 0.10),  # W
    # DCGM and nvidia-smi round the driver's bytes to MiB differently: on an H200 (driver
    # 580) DCGM's FB_FREE read 143155 where nvidia-smi's memory.free read 143156, embedded,
    # remote and on our NVML backend alike (which follows DCGM). The total is exact.
    ("DCGM_FI_DEV_FB_USED", "memory.used", 252, "abs", 1.0),  # MiB
    ("DCGM_FI_DEV_FB_TOTAL", "memory.total", 250, "exact", 0.0),  # MiB
    ("DCGM_FI_DEV_FB_FREE", "memory.free", 251, "abs", 1.0),  # MiB
    ("DCGM_FI_DEV_SM_CLOCK", "clocks.sm", 100, "rel", 0.05),  # MHz
    ("DCGM_FI_DEV_MEM_CLOCK", "clocks.mem", 101, "rel", 0.05),  # MHz
]
BY_SERIES = {m[0]: m for m in MAPPING}
# The reference CSV: nvidia-smi --query-gpu=<these> --format=csv,noheader,nounits
COLUMNS = ["index", "uuid"] + [m[1] for m in MAPPING]


def die(msg):
    print(f"gpu-tier: {msg}", file=sys.stderr)
    sys.exit(2)


def counters(path):
    """The field names of a counters CSV (comments and blank lines skipped)."""
    names = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name = line.split(",")[0].strip()
            if name not in BY_SERIES:
                die(f"{path}:{n}: {name} has no reference in the mapping (tests/gpu/gpu_tier.py)")
            names.append(name)
    return names


def cmd_smi_query(args):
    print(",".join(COLUMNS))


def cmd_dmon_fields(args):
    print(",".join(str(m[2]) for m in MAPPING))


def cmd_from_dcgmi(args):
    """discovery.txt dmon.txt -> the reference CSV on stdout (kit mode's nvidia-smi)."""
    discovery, dmon = (open(p).read() for p in args[:2])
    uuids, current = {}, None
    for line in discovery.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*Name:", line)
        if m:
            current = int(m.group(1))
        m = re.search(r"Device UUID:\s*(\S+)", line)
        if m and current is not None:
            uuids[current] = m.group(1)
    rows = []
    for line in dmon.splitlines():
        m = re.match(r"GPU\s+(\d+)\s+(.*)$", line.strip())
        if not m:
            continue
        gpu, values = int(m.group(1)), m.group(2).split()
        if len(values) != len(MAPPING):
            die(f"dcgmi dmon line has {len(values)} values, {len(MAPPING)} expected: {line}")
        if gpu not in uuids:
            die(f"dcgmi discovery names no UUID for GPU {gpu}")
        rows.append([str(gpu), uuids[gpu]] + values)
    if not rows:
        die("dcgmi dmon reported no GPU:\n" + dmon)
    w = csv.writer(sys.stdout, lineterminator="\n")
    for r in rows:
        w.writerow(r)


def parse_reference(text):
    """{uuid: {property: float or None}} from nvidia-smi's CSV (noheader, nounits)."""
    ref = {}
    for row in csv.reader(io.StringIO(text)):
        row = [c.strip() for c in row]
        if not row or not any(row):
            continue
        if len(row) != len(COLUMNS):
            die(f"reference row has {len(row)} columns, {len(COLUMNS)} expected: {row}")
        values = {}
        for col, v in zip(COLUMNS[2:], row[2:]):
            try:
                values[col] = float(v)
            except ValueError:
                values[col] = None  # [N/A], [Not Supported]
        ref[row[1]] = values
    return ref


SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\}\s+(\S+)')


def parse_page(text):
    """[(series, labels, value)] of the DCGM_ series of a text-format page."""
    out = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("DCGM_"):
            continue
        labels = dict(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def complete(page, names, gpus):
    have = {(s, l.get("UUID")) for s, l, _ in parse_page(page)}
    uuids = {l.get("UUID") for _, l, _ in parse_page(page) if l.get("UUID")}
    return len(uuids) >= gpus and all((n, u) in have for n in names for u in uuids)


def cmd_wait_scrape(args):
    """URL COUNTERS GPUS OUT: waits (60 s) until the page has every field for GPUS GPUs."""
    url, names, gpus, out = args[0], counters(args[1]), int(args[2]), args[3]
    deadline, page, err = time.time() + 60, "", ""
    while time.time() < deadline:
        try:
            page = urllib.request.urlopen(url, timeout=5).read().decode()
            if complete(page, names, gpus):
                open(out, "w").write(page)
                return
        except OSError as e:
            err = str(e)
        time.sleep(0.2)
    open(out, "w").write(page)
    die(f"{url} did not serve {names} for {gpus} GPUs within 60 s ({err}); last page in {out}")


def cmd_wait_port(args):
    port, deadline = int(args[0]), time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    die(f"nothing listens on 127.0.0.1:{port} after 30 s")


def cmd_free_port(args):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cmd_compare(args):
    """MODE PAGE REFERENCE COUNTERS: every exported GPU value against the reference."""
    mode, page, reference, names = args[0], open(args[1]).read(), args[2], counters(args[3])
    ref = parse_reference(open(reference).read())
    samples = parse_page(page)
    failures, checked = [], 0
    seen = set()
    for series, labels, value in samples:
        uuid = labels.get("UUID")
        if series not in BY_SERIES:
            failures.append(f"{series}: exported but has no reference in the mapping")
            continue
        _, prop, _, kind, tol = BY_SERIES[series]
        if uuid not in ref:
            failures.append(f"{series}{{UUID={uuid}}}: no such GPU in the reference")
            continue
        seen.add((series, uuid))
        want = ref[uuid][prop]
        if want is None:
            failures.append(f"{series} {uuid}: exported {value}, {prop} has no value")
            continue
        diff = abs(value - want)
        ok = {
            "abs": diff <= tol,
            "rel": diff <= tol * abs(want),
            "exact": diff == 0,
        }[kind]
        bound = {"abs": f"+-{tol:g}", "rel": f"+-{tol * 100:g} %", "exact": "exact"}[kind]
        checked += 1
        line = f"{mode}: {series} {uuid}: exported {value:g}, {prop} {want:g} ({bound})"
        print(("ok   " if ok else "FAIL ") + line)
        if not ok:
            failures.append(line)
    for uuid in ref:
        for name in names:
            if (name, uuid) not in seen:
                failures.append(f"{mode}: {name} {uuid}: not exported")
    if failures:
        print(f"gpu-tier {mode}: {len(failures)} mismatches of {checked} values:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        sys.exit(1)
    print(f"gpu-tier {mode}: {checked} values match")


# NVML calls that change a GPU (DCGM's recorder lists the ones it never calls in
# `_nvml_not_captured_funcs`; anywhere else such a name is a call it could make).
SETTER = re.compile(
    r"^nvml[A-Za-z]*?(Set|Reset|Clear|Create|Destroy|Modify|Freeze|Remove|Register|Discover)"
    r"[A-Z_][A-Za-z0-9_]*$"
)


def cmd_check_recorder(args):
    """FILE: refuses (exit 2) a recorder whose code names an NVML setter outside its list
    of functions it does not capture."""
    tree = ast.parse(open(args[0]).read(), args[0])
    listed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_nvml_not_captured_funcs" for t in node.targets
        ):
            listed |= {id(n) for n in ast.walk(node.value)}
    found = []
    for node in ast.walk(tree):
        if id(node) in listed:
            continue
        name = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        if name and SETTER.match(name):
            found.append(f"{args[0]}:{node.lineno}: {name}")
    if found:
        die("refusing to run the recorder, it names NVML setters:\n  " + "\n  ".join(found))


COMMANDS = {
    "check-recorder": cmd_check_recorder,
    "smi-query": cmd_smi_query,
    "dmon-fields": cmd_dmon_fields,
    "from-dcgmi": cmd_from_dcgmi,
    "wait-scrape": cmd_wait_scrape,
    "wait-port": cmd_wait_port,
    "free-port": cmd_free_port,
    "compare": cmd_compare,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die(f"usage: gpu_tier.py {'|'.join(COMMANDS)} ...")
    COMMANDS[sys.argv[1]](sys.argv[2:])
