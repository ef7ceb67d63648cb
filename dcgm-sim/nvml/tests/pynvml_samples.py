"""Reads per-process utilisation samples of GPU 0 over a few seconds through NVIDIA's Python
bindings (nvidia-ml-py's pynvml), each read asking only for samples newer than the last one
seen, and changes processes through the simulator's control file (env DCGM_SIM_CONTROL) in
between. Prints every read as JSON on stdout. Used by tests/pynvml.rs.
Exit status 3 with a message on stderr: pynvml is not installed."""
import json
import os
import sys
import time

try:
    import pynvml as n
except ImportError as e:
    print(f"pynvml is not installed ({e}); pip install nvidia-ml-py", file=sys.stderr)
    sys.exit(3)

CONTROL = os.environ["DCGM_SIM_CONTROL"]


def read(h, since):
    try:
        return [[s.pid, s.timeStamp, s.smUtil] for s in n.nvmlDeviceGetProcessUtilization(h, since)]
    except n.NVMLError_NotFound:
        return []


def wait(h, since, done):
    """Reads until `done` holds for the samples newer than `since` (bounded: 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        got = read(h, since)
        if done(got):
            return got
        if time.monotonic() > deadline:
            sys.exit(f"samples newer than {since} never matched; last read {got}")
        time.sleep(0.05)


def newest(samples):
    return max(t for _, t, _ in samples)


def control(line):
    with open(CONTROL, "a") as f:
        f.write(line + "\n")


def in_newest_second(pid):
    return lambda got: bool(got) and any(p == pid for p, t, _ in got if t == newest(got))


n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
out = {"reads": []}
first = wait(h, 0, lambda got: len({t for _, t, _ in got}) >= 3)
out["reads"].append({"since": 0, "samples": first})
out["not_found"] = read(h, 2**63)
control("process_util 4141 80")
control("process_start 9001 0 sm_util=5 used_memory_mib=64 name=late")
second = wait(h, newest(first), in_newest_second(9001))
out["reads"].append({"since": newest(first), "samples": second})
out["running"] = sorted(p.pid for p in n.nvmlDeviceGetComputeRunningProcesses(h))
control("process_stop 9001")
third = wait(h, newest(second), lambda got: bool(got) and not in_newest_second(9001)(got))
out["reads"].append({"since": newest(second), "samples": third})
n.nvmlShutdown()
json.dump(out, sys.stdout)
