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
//
// A GPU in MIG mode (mig=1) is followed by one line per MIG device, a GPU instance with one
// compute instance:
//
//   mig uuid=MIG-0a1b gi=1 ci=0 profile=3g.40gb mem_used_mib=512 pids=789 util=40
//
// The GPU answers NVML's MIG queries as the driver does: nvmlDeviceGetMaxMigDeviceCount (7),
// nvmlDeviceGetMigDeviceHandleByIndex (NVML_ERROR_NOT_FOUND past the last device),
// nvmlDeviceIsMigDeviceHandle, nvmlDeviceGetGpuInstanceId, nvmlDeviceGetComputeInstanceId,
// nvmlDeviceGetDeviceHandleFromMigDeviceHandle, nvmlDeviceGetAttributes_v2 and
// nvmlDeviceGetGpuInstanceProfileInfoV. A MIG device answers nvmlDeviceGetUUID,
// nvmlDeviceGetMemoryInfo and the running processes for itself; its parent lists every
// process with its GPU and compute instance ids. In MIG mode the GPU's utilization is
// NVML_ERROR_NOT_SUPPORTED, as nvidia-smi's "N/A" shows; a MIG device's activity comes through
// GPU performance monitoring instead (nvmlGpmQueryDeviceSupport on compute capability 9 and
// later, nvmlGpmSampleAlloc/Free, nvmlGpmMigSampleGet, nvmlGpmMetricsGet): here
// NVML_GPM_METRIC_GRAPHICS_UTIL between two samples is the device's `util` when the second was
// taken (no `util`: its samples fail as unsupported). The profiles are the MIG User Guide's
// for a GPU of 40, 80 or 141 GB (by mem_total_mib); their memory here is an eighth of the
// GPU's per memory slice, near the driver's figures.
//
// Layouts change through NVML's own calls (nvmlDeviceSetMigMode, nvmlDeviceGetGpuInstances,
// nvmlDeviceCreateGpuInstanceWithPlacement, nvmlGpuInstanceGetInfo, nvmlGpuInstanceDestroy,
// nvmlGpuInstanceGetComputeInstanceProfileInfo, nvmlGpuInstanceCreateComputeInstance,
// nvmlGpuInstanceGetComputeInstances, nvmlComputeInstanceDestroy), which check placements,
// compute slices and processes as the driver does and write the result back to the file
// (`start=` on a mig line is its first memory slice).

#include <cstdio>
#include <cstdlib>
#include <cstring>

enum {
  kSuccess = 0,
  kUninitialized = 1,
  kInvalidArgument = 2,
  kNotSupported = 3,
  kNotFound = 6,
  kInsufficientSize = 7,
  kDriverNotLoaded = 9,
};

#define kMaxGpus 16
#define kMaxPids 64
#define kMaxMigDevices 7  /* per GPU: seven 1g instances at most */

struct MigDevice {
  char uuid[80];
  char profile[32];
  int gi, ci; /* ci < 0: a GPU instance with no compute instance yet */
  int start;  /* its first memory slice; -1 when the line gave none */
  long mem_used_mib;
  long util; /* -1: none */
  unsigned pids[kMaxPids];
  int npids;
  struct Gpu* parent;
};

struct Gpu {
  char uuid[80];
  char name[96];
  long util, mem_util, mem_used_mib, mem_total_mib, power_mw, temp, mig, nvlinks, nvlinks_up;
  int cc_major, cc_minor;
  unsigned pids[kMaxPids];
  int npids;
  struct MigDevice mig_devices[kMaxMigDevices];
  int nmig;
};

static struct Gpu gpus[kMaxGpus];
static int ngpus = 0;
static int initialized = 0;

/* A GPU instance profile as nvmlDeviceGetGpuInstanceProfileInfoV reports it, by the
 * NVML_GPU_INSTANCE_PROFILE_* it is asked for. */
struct Profile {
  unsigned nvml_profile; /* the enum asked for */
  unsigned id;           /* the driver's profile id (nvidia-smi mig -lgip's ID column) */
  unsigned slices, memory_slices, instances, ofa, jpeg;
  const char* suffix; /* after "<slices>g." */
};
static const struct Profile kProfiles[] = {
    {0x0, 19, 1, 1, 7, 0, 0, ""},   /* 1g */
    {0x7, 20, 1, 1, 1, 1, 1, "+me"}, /* 1g with media extensions */
    {0x9, 15, 1, 2, 4, 0, 0, ""},   /* 1g on two memory slices */
    {0x1, 14, 2, 2, 3, 0, 0, ""},   /* 2g */
    {0x2, 9, 3, 4, 2, 0, 0, ""},    /* 3g */
    {0x3, 5, 4, 4, 1, 0, 0, ""},    /* 4g */
    {0x4, 0, 7, 8, 1, 1, 1, ""},    /* 7g */
};
#define kNumProfiles (sizeof kProfiles / sizeof kProfiles[0])

/* The GB a profile's name gives on this GPU, by memory slices: 40, 80 and 141 GB parts. */
static int ProfileGb(const struct Gpu* g, unsigned memory_slices) {
  static const int k40[] = {0, 5, 10, 0, 20, 0, 0, 0, 40};
  static const int k80[] = {0, 10, 20, 0, 40, 0, 0, 0, 80};
  static const int k141[] = {0, 18, 35, 0, 71, 0, 0, 0, 141};
  if (g->mem_total_mib >= 130000) return k141[memory_slices];
  if (g->mem_total_mib >= 70000) return k80[memory_slices];
  return k40[memory_slices];
}

static void ProfileName(const struct Gpu* g, const struct Profile* p, char* out, size_t size) {
  snprintf(out, size, "%ug.%dgb%s", p->slices, ProfileGb(g, p->memory_slices), p->suffix);
}

/* The profile a MIG device line names, on its GPU. */
static const struct Profile* ProfileOf(const struct MigDevice* d) {
  for (size_t i = 0; i < kNumProfiles; ++i) {
    char name[32];
    ProfileName(d->parent, &kProfiles[i], name, sizeof name);
    if (strcmp(name, d->profile) == 0) return &kProfiles[i];
  }
  return NULL;
}

static long ProfileMib(const struct Gpu* g, const struct Profile* p) {
  return g->mem_total_mib / 8 * (long)p->memory_slices;
}

static void ReadPids(const char* v, unsigned* pids, int* npids) {
  char* save = NULL;
  char copy[512];
  snprintf(copy, sizeof copy, "%s", v);
  for (char* p = strtok_r(copy, ",", &save); p != NULL && *npids < kMaxPids;
       p = strtok_r(NULL, ",", &save)) {
    pids[(*npids)++] = (unsigned)strtoul(p, NULL, 10);
  }
}

/* A "mig ..." line: a MIG device of the GPU before it. */
static void ReadMigDevice(char* line, struct Gpu* g) {
  if (g == NULL || g->nmig >= kMaxMigDevices) return;
  struct MigDevice* d = &g->mig_devices[g->nmig++];
  memset(d, 0, sizeof *d);
  d->parent = g;
  d->util = -1;
  d->start = -1;
  for (char* word = strtok(line, " \t\n"); word != NULL; word = strtok(NULL, " \t\n")) {
    char* eq = strchr(word, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    const char* v = eq + 1;
    if (strcmp(word, "uuid") == 0) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (strcmp(word, "profile") == 0) snprintf(d->profile, sizeof d->profile, "%s", v);
    else if (strcmp(word, "gi") == 0) d->gi = atoi(v);
    else if (strcmp(word, "ci") == 0) d->ci = atoi(v);
    else if (strcmp(word, "start") == 0) d->start = atoi(v);
    else if (strcmp(word, "mem_used_mib") == 0) d->mem_used_mib = atol(v);
    else if (strcmp(word, "util") == 0) d->util = atol(v);
    else if (strcmp(word, "pids") == 0) ReadPids(v, d->pids, &d->npids);
  }
}

static int Load(void) {
  const char* path = getenv("BMAS_FAKE_NVML");
  FILE* f = path != NULL ? fopen(path, "r") : NULL;
  if (f == NULL) return kDriverNotLoaded;
  char line[1024];
  ngpus = 0;
  while (ngpus < kMaxGpus && fgets(line, sizeof line, f) != NULL) {
    if (line[0] == '#' || line[0] == '\n') continue;
    if (strncmp(line, "mig ", 4) == 0) {
      ReadMigDevice(line + 4, ngpus > 0 ? &gpus[ngpus - 1] : NULL);
      continue;
    }
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
      else if (strcmp(word, "pids") == 0) ReadPids(v, g->pids, &g->npids);
    }
  }
  fclose(f);
  return kSuccess;
}

/* Writes the GPUs back to the file, as Load reads them: what the layout calls changed is what
 * the next read (and the test) sees. */
static int Save(void) {
  const char* path = getenv("BMAS_FAKE_NVML");
  char temp[1024];
  snprintf(temp, sizeof temp, "%s.new", path != NULL ? path : "");
  FILE* f = path != NULL ? fopen(temp, "w") : NULL;
  if (f == NULL) return kDriverNotLoaded;
  for (int i = 0; i < ngpus; ++i) {
    const struct Gpu* g = &gpus[i];
    char name[96];
    snprintf(name, sizeof name, "%s", g->name);
    for (char* c = name; *c; ++c) if (*c == ' ') *c = '_';
    fprintf(f, "uuid=%s name=%s", g->uuid, name);
    const struct { const char* key; long value; } longs[] = {
        {"util", g->util}, {"mem_util", g->mem_util}, {"mem_used_mib", g->mem_used_mib},
        {"mem_total_mib", g->mem_total_mib}, {"power_mw", g->power_mw}, {"temp", g->temp},
        {"mig", g->mig}, {"nvlinks", g->nvlinks}};
    for (size_t k = 0; k < sizeof longs / sizeof longs[0]; ++k) {
      if (longs[k].value >= 0) fprintf(f, " %s=%ld", longs[k].key, longs[k].value);
    }
    if (g->nvlinks >= 0) fprintf(f, " nvlinks_up=%ld", g->nvlinks_up);
    if (g->cc_major >= 0) fprintf(f, " cc=%d.%d", g->cc_major, g->cc_minor);
    for (int p = 0; p < g->npids; ++p) fprintf(f, "%s%u", p == 0 ? " pids=" : ",", g->pids[p]);
    fprintf(f, "\n");
    for (int m = 0; m < g->nmig; ++m) {
      const struct MigDevice* d = &g->mig_devices[m];
      fprintf(f, "mig uuid=%s gi=%d ci=%d profile=%s start=%d mem_used_mib=%ld", d->uuid, d->gi,
              d->ci, d->profile, d->start, d->mem_used_mib);
      if (d->util >= 0) fprintf(f, " util=%ld", d->util);
      for (int p = 0; p < d->npids; ++p) fprintf(f, "%s%u", p == 0 ? " pids=" : ",", d->pids[p]);
      fprintf(f, "\n");
    }
  }
  fclose(f);
  return rename(temp, path) == 0 ? kSuccess : kDriverNotLoaded;
}

extern "C" {

static struct Gpu* Device(void* device) {
  struct Gpu* g = (struct Gpu*)device;
  if (!initialized || g < gpus || g >= gpus + ngpus) return NULL;
  /* A MIG device's handle points inside its GPU's entry, never at its start. */
  if (((const char*)g - (const char*)gpus) % sizeof(struct Gpu) != 0) return NULL;
  return g;
}

/* A MIG device handle (one nvmlDeviceGetMigDeviceHandleByIndex gave), or NULL. */
static struct MigDevice* MigHandle(void* device) {
  if (!initialized) return NULL;
  for (int i = 0; i < ngpus; ++i) {
    struct MigDevice* first = gpus[i].mig_devices;
    struct MigDevice* d = (struct MigDevice*)device;
    if (d >= first && d < first + gpus[i].nmig &&
        ((const char*)d - (const char*)first) % sizeof *first == 0) {
      return d;
    }
  }
  return NULL;
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
    case kNotFound: return "Not Found";
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
  struct MigDevice* d = MigHandle(device);
  if (d != NULL) {
    snprintf(out, size, "%s", d->uuid);
    return kSuccess;
  }
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
  if (g == NULL) return MigHandle(device) != NULL ? kNotSupported : kInvalidArgument;
  if (g->util < 0 || g->mig == 1) return kNotSupported;
  rates[0] = (unsigned)g->util;
  rates[1] = (unsigned)(g->mem_util < 0 ? 0 : g->mem_util);
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, unsigned long long* memory /* total, free, used */) {
  const unsigned long long mib = 1024ULL * 1024ULL;
  struct MigDevice* d = MigHandle(device);
  const struct Profile* p = d != NULL ? ProfileOf(d) : NULL;
  if (d != NULL) {
    if (p == NULL) return kNotSupported;
    memory[0] = (unsigned long long)ProfileMib(d->parent, p) * mib;
    memory[2] = (unsigned long long)d->mem_used_mib * mib;
    memory[1] = memory[0] - memory[2];
    return kSuccess;
  }
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->mem_total_mib < 0) return kNotSupported;
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
static int Processes(const unsigned* pids, int npids, unsigned gi, unsigned ci,
                     unsigned* count, struct ProcessInfo* infos, int* filled) {
  for (int i = 0; i < npids; ++i) {
    if ((unsigned)*filled < *count) {
      infos[*filled].pid = pids[i];
      infos[*filled].used = 0;
      infos[*filled].gpu_instance = gi;
      infos[*filled].compute_instance = ci;
    }
    ++*filled;
  }
  return kSuccess;
}
int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned* count,
                                            struct ProcessInfo* infos) {
  int filled = 0;
  struct MigDevice* d = MigHandle(device);
  if (d != NULL) {
    Processes(d->pids, d->npids, (unsigned)d->gi, (unsigned)d->ci, count, infos, &filled);
  } else {
    struct Gpu* g = Device(device);
    if (g == NULL) return kInvalidArgument;
    Processes(g->pids, g->npids, 0xFFFFFFFFu, 0xFFFFFFFFu, count, infos, &filled);
    /* In MIG mode the GPU lists the processes of all its MIG devices. */
    for (int m = 0; m < g->nmig; ++m) {
      struct MigDevice* s = &g->mig_devices[m];
      Processes(s->pids, s->npids, (unsigned)s->gi, (unsigned)s->ci, count, infos, &filled);
    }
  }
  if (*count < (unsigned)filled) {
    *count = (unsigned)filled;
    return kInsufficientSize;
  }
  *count = (unsigned)filled;
  return kSuccess;
}

/* MIG. */
int nvmlDeviceGetMaxMigDeviceCount(void* device, unsigned* count) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->mig < 0) return kNotSupported;
  *count = kMaxMigDevices;
  return kSuccess;
}
int nvmlDeviceGetMigDeviceHandleByIndex(void* device, unsigned index, void** mig) {
  struct Gpu* g = Device(device);
  if (g == NULL) return kInvalidArgument;
  if (g->mig != 1) return kNotSupported; /* not in MIG mode */
  if (index >= kMaxMigDevices) return kInvalidArgument;
  if (index >= (unsigned)g->nmig) return kNotFound;
  *mig = &g->mig_devices[index];
  return kSuccess;
}
int nvmlDeviceIsMigDeviceHandle(void* device, unsigned* is_mig) {
  if (MigHandle(device) == NULL && Device(device) == NULL) return kInvalidArgument;
  *is_mig = MigHandle(device) != NULL ? 1 : 0;
  return kSuccess;
}
int nvmlDeviceGetGpuInstanceId(void* device, unsigned* id) {
  struct MigDevice* d = MigHandle(device);
  if (d == NULL) return Device(device) != NULL ? kNotSupported : kInvalidArgument;
  *id = (unsigned)d->gi;
  return kSuccess;
}
int nvmlDeviceGetComputeInstanceId(void* device, unsigned* id) {
  struct MigDevice* d = MigHandle(device);
  if (d == NULL) return Device(device) != NULL ? kNotSupported : kInvalidArgument;
  *id = (unsigned)d->ci;
  return kSuccess;
}
int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void* device, void** parent) {
  struct MigDevice* d = MigHandle(device);
  if (d == NULL) return kInvalidArgument;
  *parent = d->parent;
  return kSuccess;
}
/* nvmlDeviceAttributes_t. */
struct Attributes {
  unsigned multiprocessors, copy_engines, decoders, encoders, jpegs, ofas;
  unsigned gpu_instance_slices, compute_instance_slices;
  unsigned long long memory_mb;
};
int nvmlDeviceGetAttributes_v2(void* device, struct Attributes* a) {
  struct MigDevice* d = MigHandle(device);
  const struct Profile* p = d != NULL ? ProfileOf(d) : NULL;
  if (p == NULL) return Device(device) != NULL || d != NULL ? kNotSupported : kInvalidArgument;
  memset(a, 0, sizeof *a);
  a->multiprocessors = 16 * p->slices; /* an H100 SXM5 has 132 SMs; 16 per 1g slice */
  a->jpegs = p->jpeg;
  a->ofas = p->ofa;
  a->gpu_instance_slices = a->compute_instance_slices = p->slices;
  a->memory_mb = (unsigned long long)ProfileMib(d->parent, p);
  return kSuccess;
}
/* nvmlGpuInstanceProfileInfo_v2_t. */
struct ProfileInfoV2 {
  unsigned version, id, p2p, slices, instances, multiprocessors, copy_engines, decoders,
      encoders, jpegs, ofas;
  unsigned long long memory_mb;
  char name[96];
};
int nvmlDeviceGetGpuInstanceProfileInfoV(void* device, unsigned profile, struct ProfileInfoV2* info) {
  struct Gpu* g = Device(device);
  if (g == NULL || info == NULL) return kInvalidArgument;
  if (g->mig < 0) return kNotSupported;
  if ((info->version & 0xFFFFFF) != sizeof *info || (info->version >> 24) != 2) {
    return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
  }
  for (size_t i = 0; i < kNumProfiles; ++i) {
    const struct Profile* p = &kProfiles[i];
    if (p->nvml_profile != profile) continue;
    const unsigned version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    info->id = p->id;
    info->slices = p->slices;
    info->instances = p->instances;
    info->multiprocessors = 16 * p->slices;
    info->jpegs = p->jpeg;
    info->ofas = p->ofa;
    info->memory_mb = (unsigned long long)ProfileMib(g, p);
    char name[32];
    ProfileName(g, p, name, sizeof name);
    snprintf(info->name, sizeof info->name, "MIG %s", name);
    return kSuccess;
  }
  return kNotSupported;
}

/* GPU performance monitoring. */
struct GpmSupport {
  unsigned version, supported;
};
struct GpmSample {
  unsigned magic;
  double util;
};
#define kGpmMagic 0x67706d31u
struct GpmMetric {
  unsigned id;
  int ret;
  double value;
  struct {
    char *short_name, *long_name, *unit;
  } info;
};
struct GpmMetricsGet {
  unsigned version, count;
  struct GpmSample *sample1, *sample2;
  struct GpmMetric metrics[1];
};
int nvmlGpmQueryDeviceSupport(void* device, struct GpmSupport* support) {
  struct Gpu* g = Device(device);
  if (g == NULL || support == NULL || support->version != 1) return kInvalidArgument;
  support->supported = g->cc_major >= 9 ? 1 : 0;
  return kSuccess;
}
int nvmlGpmSampleAlloc(struct GpmSample** sample) {
  if (sample == NULL) return kInvalidArgument;
  *sample = (struct GpmSample*)calloc(1, sizeof **sample);
  (*sample)->magic = kGpmMagic;
  return kSuccess;
}
int nvmlGpmSampleFree(struct GpmSample* sample) {
  if (sample == NULL || sample->magic != kGpmMagic) return kInvalidArgument;
  sample->magic = 0;
  free(sample);
  return kSuccess;
}
int nvmlGpmMigSampleGet(void* device, unsigned gpu_instance, struct GpmSample* sample) {
  struct Gpu* g = Device(device);
  if (g == NULL || sample == NULL || sample->magic != kGpmMagic) return kInvalidArgument;
  if (g->mig != 1) return kNotSupported;
  for (int m = 0; m < g->nmig; ++m) {
    if ((unsigned)g->mig_devices[m].gi != gpu_instance) continue;
    if (g->mig_devices[m].util < 0) return kNotSupported;
    sample->util = (double)g->mig_devices[m].util;
    return kSuccess;
  }
  return kNotFound;
}
int nvmlGpmMetricsGet(struct GpmMetricsGet* get) {
  if (get == NULL || get->version != 1 || get->sample1 == NULL || get->sample2 == NULL ||
      get->sample1->magic != kGpmMagic || get->sample2->magic != kGpmMagic) {
    return kInvalidArgument;
  }
  for (unsigned i = 0; i < get->count; ++i) {
    struct GpmMetric* m = &get->metrics[i];
    m->ret = m->id == 1 ? kSuccess : kNotSupported; /* NVML_GPM_METRIC_GRAPHICS_UTIL */
    m->value = m->id == 1 ? get->sample2->util : 0;
  }
  return kSuccess;
}

/* Changing a layout: MIG mode, GPU instances at a placement, one compute instance each. A GPU
 * instance's handle is its MigDevice; a compute instance's is the address one past the
 * MigDevice's start (a distinct pointer the library hands back). The driver refuses to destroy
 * an instance with processes (NVML_ERROR_IN_USE); here a GPU instance id is the lowest free one
 * from 1, and each change is written back to the file. */
#define kInUse 19
#define kInsufficientResources 23
struct Placement {
  unsigned start, size;
};
struct GpuInstanceInfo {
  void* device;
  unsigned id, profile_id;
  struct Placement placement;
};
struct ComputeInstanceProfileInfo {
  unsigned id, slices, instances, multiprocessors, copy_engines, decoders, encoders, jpegs, ofas;
};

static const struct Profile* ProfileById(unsigned id) {
  for (size_t i = 0; i < kNumProfiles; ++i) {
    if (kProfiles[i].id == id) return &kProfiles[i];
  }
  return NULL;
}
static struct MigDevice* GpuInstance(void* handle) { return MigHandle(handle); }
static struct MigDevice* ComputeInstance(void* handle) {
  struct MigDevice* d = MigHandle((char*)handle - 1);
  return d != NULL && (char*)d + 1 == (char*)handle && d->ci >= 0 ? d : NULL;
}

int nvmlDeviceSetMigMode(void* device, unsigned mode, int* activation) {
  struct Gpu* g = Device(device);
  if (g == NULL || mode > 1 || activation == NULL) return kInvalidArgument;
  if (g->mig < 0) return kNotSupported;
  if (g->npids > 0) return kInUse;
  if (mode == 0 && g->nmig > 0) return kInUse; /* instances first */
  g->mig = (long)mode;
  *activation = kSuccess;
  return Save();
}
int nvmlDeviceGetGpuInstances(void* device, unsigned profile_id, void** out, unsigned* count) {
  struct Gpu* g = Device(device);
  if (g == NULL || count == NULL) return kInvalidArgument;
  if (g->mig != 1) return kNotSupported;
  const struct Profile* p = ProfileById(profile_id);
  if (p == NULL) return kInvalidArgument;
  char name[32];
  ProfileName(g, p, name, sizeof name);
  unsigned n = 0;
  for (int m = 0; m < g->nmig; ++m) {
    if (strcmp(g->mig_devices[m].profile, name) != 0) continue;
    if (out != NULL) out[n] = &g->mig_devices[m];
    ++n;
  }
  *count = n;
  return kSuccess;
}
int nvmlDeviceCreateGpuInstanceWithPlacement(void* device, unsigned profile_id,
                                             const struct Placement* placement, void** out) {
  struct Gpu* g = Device(device);
  if (g == NULL || placement == NULL || out == NULL) return kInvalidArgument;
  if (g->mig != 1) return kNotSupported;
  const struct Profile* p = ProfileById(profile_id);
  if (p == NULL || placement->size != p->memory_slices || placement->start + placement->size > 8) {
    return kInvalidArgument;
  }
  if (g->nmig >= kMaxMigDevices) return kInsufficientResources;
  unsigned used = 0; /* memory slices taken, as bits */
  int compute = 0, ids = 0;
  for (int m = 0; m < g->nmig; ++m) {
    const struct MigDevice* d = &g->mig_devices[m];
    const struct Profile* q = ProfileOf(d);
    if (q == NULL || d->start < 0) continue;
    used |= ((1u << q->memory_slices) - 1) << d->start;
    compute += (int)q->slices;
    ids |= 1 << d->gi;
  }
  const unsigned want = ((1u << placement->size) - 1) << placement->start;
  if ((used & want) != 0 || compute + (int)p->slices > 7) return kInsufficientResources;
  struct MigDevice* d = &g->mig_devices[g->nmig++];
  memset(d, 0, sizeof *d);
  d->parent = g;
  d->util = -1;
  d->ci = -1;
  d->start = (int)placement->start;
  for (d->gi = 1; ids & (1 << d->gi); ++d->gi) {
  }
  ProfileName(g, p, d->profile, sizeof d->profile);
  char gpu_uuid[24] = {0};
  memcpy(gpu_uuid, g->uuid, sizeof gpu_uuid - 1);
  snprintf(d->uuid, sizeof d->uuid, "MIG-%s-%d", gpu_uuid, d->gi);
  *out = d;
  return Save();
}
int nvmlGpuInstanceGetInfo(void* gpu_instance, struct GpuInstanceInfo* info) {
  struct MigDevice* d = GpuInstance(gpu_instance);
  if (d == NULL || info == NULL) return kInvalidArgument;
  const struct Profile* p = ProfileOf(d);
  info->device = d->parent;
  info->id = (unsigned)d->gi;
  info->profile_id = p != NULL ? p->id : 0;
  info->placement.start = d->start < 0 ? 0 : (unsigned)d->start;
  info->placement.size = p != NULL ? p->memory_slices : 0;
  return kSuccess;
}
int nvmlGpuInstanceDestroy(void* gpu_instance) {
  struct MigDevice* d = GpuInstance(gpu_instance);
  if (d == NULL) return kInvalidArgument;
  if (d->ci >= 0) return kInUse; /* its compute instance first */
  struct Gpu* g = d->parent;
  const int at = (int)(d - g->mig_devices);
  memmove(&g->mig_devices[at], &g->mig_devices[at + 1],
          (size_t)(g->nmig - at - 1) * sizeof g->mig_devices[0]);
  --g->nmig;
  return Save();
}
/* NVML_COMPUTE_INSTANCE_PROFILE_*: 1, 2, 3, 4 and 7 slices are 0, 1, 2, 3 and 4. */
static int ComputeProfileSlices(unsigned profile) {
  static const int kSlices[] = {1, 2, 3, 4, 7};
  return profile < 5 ? kSlices[profile] : -1;
}
int nvmlGpuInstanceGetComputeInstanceProfileInfo(void* gpu_instance, unsigned profile,
                                                 unsigned engine_profile,
                                                 struct ComputeInstanceProfileInfo* info) {
  struct MigDevice* d = GpuInstance(gpu_instance);
  if (d == NULL || info == NULL || engine_profile != 0) return kInvalidArgument;
  const struct Profile* p = ProfileOf(d);
  const int slices = ComputeProfileSlices(profile);
  if (p == NULL || slices < 0 || slices > (int)p->slices) return kNotSupported;
  memset(info, 0, sizeof *info);
  info->id = profile; /* the driver's compute instance profile ids follow the enum */
  info->slices = (unsigned)slices;
  info->instances = p->slices / (unsigned)slices;
  info->multiprocessors = 16 * (unsigned)slices;
  return kSuccess;
}
int nvmlGpuInstanceCreateComputeInstance(void* gpu_instance, unsigned profile_id, void** out) {
  struct MigDevice* d = GpuInstance(gpu_instance);
  if (d == NULL || out == NULL) return kInvalidArgument;
  const struct Profile* p = ProfileOf(d);
  /* One compute instance spanning its GPU instance, as bmas makes them. */
  if (p == NULL || ComputeProfileSlices(profile_id) != (int)p->slices) return kNotSupported;
  if (d->ci >= 0) return kInsufficientResources;
  d->ci = 0;
  *out = (char*)d + 1;
  return Save();
}
int nvmlGpuInstanceGetComputeInstances(void* gpu_instance, unsigned profile_id, void** out,
                                       unsigned* count) {
  struct MigDevice* d = GpuInstance(gpu_instance);
  if (d == NULL || count == NULL) return kInvalidArgument;
  const struct Profile* p = ProfileOf(d);
  const int mine = d->ci >= 0 && p != NULL && ComputeProfileSlices(profile_id) == (int)p->slices;
  if (mine && out != NULL) out[0] = (char*)d + 1;
  *count = mine ? 1u : 0u;
  return kSuccess;
}
int nvmlComputeInstanceDestroy(void* compute_instance) {
  struct MigDevice* d = ComputeInstance(compute_instance);
  if (d == NULL) return kInvalidArgument;
  if (d->npids > 0) return kInUse;
  d->ci = -1;
  return Save();
}

}  // extern "C"
