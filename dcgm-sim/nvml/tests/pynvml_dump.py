"""Dumps what NVIDIA's Python bindings (nvidia-ml-py's pynvml) read from the NVML library
found through LD_LIBRARY_PATH, as JSON on stdout. Used by tests/pynvml.rs.
Exit status 3 with a message on stderr: pynvml is not installed."""
import json
import sys

try:
    import pynvml as n
except ImportError as e:
    print(f"pynvml is not installed ({e}); pip install nvidia-ml-py", file=sys.stderr)
    sys.exit(3)


def procs(call, h):
    return [
        {
            "pid": p.pid,
            "used": p.usedGpuMemory,
            "gi": p.gpuInstanceId,
            "ci": p.computeInstanceId,
        }
        for p in call(h)
    ]


n.nvmlInit()
out = {
    "driver": n.nvmlSystemGetDriverVersion(),
    "nvml": n.nvmlSystemGetNVMLVersion(),
    "cuda": n.nvmlSystemGetCudaDriverVersion(),
    "gpus": [],
}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    uuid = n.nvmlDeviceGetUUID(h)
    pci = n.nvmlDeviceGetPciInfo(h)
    mem = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    gpu = {
        "index": n.nvmlDeviceGetIndex(h),
        "minor": n.nvmlDeviceGetMinorNumber(h),
        "uuid": uuid,
        "by_uuid_index": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByUUID(uuid)),
        "by_pci_index": n.nvmlDeviceGetIndex(n.nvmlDeviceGetHandleByPciBusId(pci.busId)),
        "name": n.nvmlDeviceGetName(h),
        "pci_bus_id": pci.busId,
        "mig_mode": n.nvmlDeviceGetMigMode(h)[0],
        "memory": [mem.total, mem.reserved, mem.free, mem.used],
        "compute": procs(n.nvmlDeviceGetComputeRunningProcesses, h),
        "graphics": procs(n.nvmlDeviceGetGraphicsRunningProcesses, h),
        "utilization": None,
        "mig": [],
    }
    try:
        gpu["utilization"] = {
            str(s.pid): s.smUtil for s in n.nvmlDeviceGetProcessUtilization(h, 0)
        }
    except n.NVMLError as e:
        gpu["utilization"] = str(e)
    for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
        except n.NVMLError_NotFound:
            continue
        parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
        gpu["mig"].append(
            {
                "uuid": n.nvmlDeviceGetUUID(m),
                "name": n.nvmlDeviceGetName(m),
                "is_mig": n.nvmlDeviceIsMigDeviceHandle(m).value,
                "parent_uuid": n.nvmlDeviceGetUUID(parent),
                "gi": n.nvmlDeviceGetGpuInstanceId(m),
                "ci": n.nvmlDeviceGetComputeInstanceId(m),
                "compute": procs(n.nvmlDeviceGetComputeRunningProcesses, m),
            }
        )
    out["gpus"].append(gpu)
out["temperature"] = n.nvmlDeviceGetTemperature(n.nvmlDeviceGetHandleByIndex(0), 0)
try:
    n.nvmlDeviceGetFanSpeed(n.nvmlDeviceGetHandleByIndex(0))
    out["unsimulated"] = "answered"
except n.NVMLError as e:
    out["unsimulated"] = str(e)
n.nvmlShutdown()
json.dump(out, sys.stdout)
