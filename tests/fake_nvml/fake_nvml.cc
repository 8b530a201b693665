// A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for tests on machines without a GPU:
// the few NVML calls bmas makes, answering from a file that the test writes and may rewrite
// between reads. $BMAS_FAKE_NVML names it; one GPU per line, `key=value` words:
//
//   uuid=GPU-0 name=NVIDIA_H100_80GB_HBM3 util=35 mem_util=10 mem_used_mib=1024
//   mem_total_mib=81559 power_mw=250000 temp=61 mig=0 nvlinks=18 nvlinks_up=18 cc=9.0
//   pids=123,456
//
// (`_` in a name reads as a space; a key left out is a reading the GPU does not support, which
// the call answers with NVML_ERROR_NOT_SUPPORTED, as the driver does.) No file: nvmlInit fails
// with NVML_ERROR_DRIVER_NOT_LOADED, and so does a read after the file is removed. Return codes
// are NVML's.

#include <cstdio>
#include <cstdlib>
#include <cstring>

enum {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kInsufficientSize = 7,
  kDriverNotLoaded = 9,
};

#define kMaxGpus 16
#define kMaxPids 64

struct Gpu {
  char uuid[80];
  char name[96];
  long util, mem_util, mem_used_mib, mem_total_mib, power_mw, temp, mig, nvlinks, nvlinks_up;
  int cc_major, cc_minor;
  unsigned pids[kMaxPids];
  int npids;
};

static struct Gpu gpus[kMaxGpus];
static int ngpus = 0;
static int initialized = 0;

static int Load(void) {
  const char* path = getenv("BMAS_FAKE_NVML");
  FILE* f = path != NULL ? fopen(path, "r") : NULL;
  if (f == NULL) return kDriverNotLoaded;
  char line[1024];
  ngpus = 0;
  while (ngpus < kMaxGpus && fgets(line, sizeof line, f) != NULL) {
    if (line[0] == '#' || line[0] == '\n') continue;
    struct Gpu* g = &gpus[ngpus++];
    memset(g, 0, sizeof *g);
    g->util = g->mem_util = g->mem_used_mib = g->mem_total_mib = g->power_mw = g->temp = -1;
    g->mig = g->nvlinks = g->cc_major = -1;
    g->nvlinks_up = 0;
    for (char* word = strtok(line, " \t\n"); word != NULL; word = strtok(NULL, " \t\n")) {
      char* eq = strchr(word, '=');
      if (eq == NULL) continue;
      *eq = '\0';
      const char* v = eq + 1;
      if (strcmp(word, "uuid") == 0) snprintf(g->uuid, sizeof g->uuid, "%s", v);
      else if (strcmp(word, "name") == 0) {
        snprintf(g->name, sizeof g->name, "%s", v);
        for (char* c = g->name; *c; ++c) if (*c == '_') *c = ' ';
      }
      else if (strcmp(word, "util") == 0) g->util = atol(v);
      else if (strcmp(word, "mem_util") == 0) g->mem_util = atol(v);
      else if (strcmp(word, "mem_used_mib") == 0) g->mem_used_mib = atol(v);
      else if (strcmp(word, "mem_total_mib") == 0) g->mem_total_mib = atol(v);
      else if (strcmp(word, "power_mw") == 0) g->power_mw = atol(v);
      else if (strcmp(word, "temp") == 0) g->temp = atol(v);
      else if (strcmp(word, "mig") == 0) g->mig = atol(v);
      else if (strcmp(word, "nvlinks") == 0) g->nvlinks = atol(v);
      else if (strcmp(word, "nvlinks_up") == 0) g->nvlinks_up = atol(v);
      else if (strcmp(word, "cc") == 0) sscanf(v, "%d.%d", &g->cc_major, &g->cc_minor);
      else if (strcmp(word, "pids") == 0) {
        char* save = NULL;
        char copy[512];
        snprintf(copy, sizeof copy, "%s", v);
        for (char* p = strtok_r(copy, ",", &save); p != NULL && g->npids < kMaxPids;
             p = strtok_r(NULL, ",", &save)) {
          g->pids[g->npids++] = (unsigned)strtoul(p, NULL, 10);
        }
      }
    }
  }
  fclose(f);
  return kSuccess;
}

extern "C" {

static struct Gpu* Device(void* device) {
  struct Gpu* g = (struct Gpu*)device;
  if (!initialized || g < gpus || g >= gpus + ngpus) return NULL;
  return g;
}

int nvmlInit_v2(void) {
  int r = Load();
  initialized = r == kSuccess;
  return r;
}
int nvmlShutdown(void) {
  if (!initialized) return kUninitialized;
  initialized = 0;
  return kSuccess;
}
const char* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlSystemGetNVMLVersion(char* out, unsigned size) {
  snprintf(out, size, "12.555.42-fake");
  return kSuccess;
}
int nvmlSystemGetDriverVersion(char* out, unsigned size) {
  snprintf(out, size, "555.42.06-fake");
  return kSuccess;
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized) return kUninitialized;
  // The test may have rewritten the file, or removed it: the driver went away.
  if (Load() != kSuccess) return kDriverNotLoaded;
  *count = (unsigned)ngpus;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (!initialized) return kUninitialized;
  if (index >= (unsigned)ngpus) return kInvalidArgument;
  *device = &gpus[index];
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* out, unsigned size) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  snprintf(out, size, "%s", g->uuid);
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* out, unsigned size) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  snprintf(out, size, "%s", g->name);
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* device, unsigned* rates /* gpu, memory */) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->util < 0) return kNotSupported;
  rates[0] = (unsigned)g->util;
  rates[1] = (unsigned)(g->mem_util < 0 ? 0 : g->mem_util);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, unsigned long long* memory /* total, free, used */) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->mem_total_mib < 0) return kNotSupported;
  const unsigned long long mib = 1024ULL * 1024ULL;
  memory[0] = (unsigned long long)g->mem_total_mib * mib;
  memory[2] = (unsigned long long)(g->mem_used_mib < 0 ? 0 : g->mem_used_mib) * mib;
  memory[1] = memory[0] - memory[2];
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->power_mw < 0) return kNotSupported;
  *milliwatts = (unsigned)g->power_mw;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, unsigned sensor, unsigned* celsius) {
  struct Gpu* g = Device(device);
  if (g == NULL || sensor != 0) return kInvalidArgument;
  if (g->temp < 0) return kNotSupported;
  *celsius = (unsigned)g->temp;
  return kSuccess;
}
int nvmlDeviceGetMigMode(void* device, unsigned* current, unsigned* pending) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->mig < 0) return kNotSupported;
  *current = *pending = (unsigned)g->mig;
  return kSuccess;
}
int nvmlDeviceGetNvLinkState(void* device, unsigned link, int* active) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->nvlinks < 0) return kNotSupported;
  if (link >= (unsigned)g->nvlinks) return kInvalidArgument;
  *active = link < (unsigned)g->nvlinks_up ? 1 : 0;
  return kSuccess;
}
int nvmlDeviceGetCudaComputeCapability(void* device, int* major, int* minor) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->cc_major < 0) return kNotSupported;
  *major = g->cc_major;
  *minor = g->cc_minor;
  return kSuccess;
}
/* nvmlProcessInfo_v2_t: pid, usedGpuMemory, gpuInstanceId, computeInstanceId. */
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gpu_instance, compute_instance;
};
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count,
                                            struct ProcessInfo* infos) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (*count < (unsigned)g->npids) {
    *count = (unsigned)g->npids;
    return kInsufficientSize;
  }
  for (int i = 0; i < g->npids; ++i) {
    infos[i].pid = g->pids[i];
    infos[i].used = 0;
    infos[i].gpu_instance = infos[i].compute_instance = 0xFFFFFFFFu;
  }
  *count = (unsigned)g->npids;
  return kSuccess;
}

}  // extern "C"
