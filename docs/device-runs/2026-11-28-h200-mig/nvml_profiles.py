# Read-only: NVML's MIG mode and GPU instance profile table of each GPU (pynvml), as JSON. (Placements: `nvidia-smi mig -lgipp`.)
import json
import pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "nvml": n.nvmlSystemGetNVMLVersion(), "gpus": []}
def call(f, *a):
    try:
        return f(*a)
    except Exception as e:
        return "error: " + str(e)
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    g = {"index": i, "name": call(n.nvmlDeviceGetName, h), "uuid": call(n.nvmlDeviceGetUUID, h),
         "mem_total_mib": call(lambda: n.nvmlDeviceGetMemoryInfo(h).total // 2**20),
         "mig_mode": call(n.nvmlDeviceGetMigMode, h),
         "max_mig_devices": call(n.nvmlDeviceGetMaxMigDeviceCount, h),
         "cc": call(n.nvmlDeviceGetCudaComputeCapability, h), "profiles": []}
    for p in range(0, 16):
        info = call(n.nvmlDeviceGetGpuInstanceProfileInfoV, h, p)
        if isinstance(info, str):
            info = call(n.nvmlDeviceGetGpuInstanceProfileInfo, h, p)
        if isinstance(info, str):
            g["profiles"].append({"profile": p, "info": info})
            continue
        g["profiles"].append({"profile": p, "id": info.id, "name": getattr(info, "name", b"").decode() if isinstance(getattr(info, "name", b""), bytes) else str(getattr(info, "name", "")), "slices": info.sliceCount,
                              "instances": info.instanceCount, "memory_mib": info.memorySizeMB,
                              "copy_engines": info.copyEngineCount, "decoders": info.decoderCount,
                              "jpeg": info.jpegCount, "ofa": info.ofaCount})
    out["gpus"].append(g)
print(json.dumps(out, indent=1, default=str))
