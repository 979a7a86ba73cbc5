/* A stand-in for libnvidia-ml.so.1 that the unmodified pynvml (nvidia-ml-py) loads through ctypes.
 *
 * It exports the NVML entry points cudamagic calls, with the C signatures and structure layouts of nvml.h
 * (nvmlMemory_t v1 = total, free, used; nvmlMemory_v2_t = version, total, reserved, free, used with
 * version 0x02000028; nvmlProcessInfo_v1_t = pid, usedGpuMemory (16 bytes); nvmlProcessInfo_v2_t/_v3 =
 * pid, usedGpuMemory, gpuInstanceId, computeInstanceId (24 bytes); nvmlPciInfo_t; nvmlUtilization_t) and
 * NVML's return codes; also the entry points that nvitop and gpustat call besides (index, encoder/decoder and PCIe
 * counters, compute and display modes, driver model, versioned temperature, per-process utilisation), so those
 * peers run on the same stand-in GPUs. What it answers is data: tests set it through the stub_* functions at the end
 * (tests/nvml_stub/__init__.py turns a scenario dict into those calls). Built by the test set-up with gcc:
 *   gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.1 nvml_stub.c
 */
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13, NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999
};

#define MAXG 4096   /* GPUs a scenario may play (the arrays grow to what stub_reset asks) */
#define MAXP 64
#define MAXMIG 7
#define MAXERR 256
#define NVML_MEMORY_V2 0x02000028u

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; } nvmlProcessInfo_v1_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; }
    nvmlProcessInfo_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    char busIdLegacy[16]; unsigned int domain, bus, device, pciDeviceId, pciSubSystemId; char busId[32];
} nvmlPciInfo_t;

/* Numeric fields, set by name with stub_set(). */
enum {
    K_MEM_TOTAL, K_MEM_USED, K_MEM_RESERVED, K_UTIL_GPU, K_UTIL_MEM, K_TEMP, K_POWER, K_POWER_LIMIT, K_FAN,
    K_CLOCK_SM, K_CLOCK_MEM, K_MAX_CLOCK_SM, K_MAX_CLOCK_MEM, K_PSTATE, K_THROTTLE, K_PERSISTENCE, K_MIG_CUR,
    K_MIG_PEND, K_CC_MAJOR, K_CC_MINOR, K_LOST, K_ECC_CUR, K_ECC_PEND, K_ECC_VOL_UNC, K_ECC_AGG_UNC,
    K_RETIRED_PENDING, K_REMAP_CORR, K_REMAP_UNC, K_REMAP_PENDING, K_REMAP_FAILURE, K_PROC_STRUCT_BYTES,
    K_MEM_V2, K_ENC_UTIL, K_DEC_UTIL, K_PCIE_TX, K_PCIE_RX, K_COMPUTE_MODE, K_DISPLAY_MODE, K_DISPLAY_ACTIVE,
    K_DRIVER_MODEL, K_DRIVER_MODEL_PEND, NKEYS
};
static const char *KEYS[NKEYS] = {
    "memory_total", "memory_used", "memory_reserved", "util_gpu", "util_mem", "temperature", "power_draw_mw",
    "power_limit_mw", "fan", "clock_sm", "clock_mem", "max_clock_sm", "max_clock_mem", "pstate", "throttle",
    "persistence", "mig_current", "mig_pending", "cc_major", "cc_minor", "lost", "ecc_current", "ecc_pending",
    "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected", "retired_pages_pending", "remapped_correctable",
    "remapped_uncorrectable", "remapped_pending", "remapped_failure", "proc_struct_bytes", "memory_v2",
    "encoder_util", "decoder_util", "pcie_tx_kbps", "pcie_rx_kbps", "compute_mode", "display_mode", "display_active",
    "driver_model", "driver_model_pending"
};

typedef struct { char uuid[96]; unsigned long long total, used; } mig_t;
typedef struct {
    unsigned long long v[NKEYS];
    char name[96], uuid[96], bus[32];
    int nproc; unsigned int pid[MAXP]; unsigned long long pmem[MAXP];
    int nmig; mig_t mig[MAXMIG];
} gpu_t;
typedef struct { int gpu, mig; } handle_t;   /* what nvmlDevice_t points to */
typedef struct { int gpu; char fn[64]; nvmlReturn_t code; } err_t;

static gpu_t *G = NULL;
static handle_t (*H)[MAXMIG + 1] = NULL;
static int cap = 0;   /* GPUs allocated in G and H */
static int ngpu = 0, initialized = 0 /* nvmlInit calls not yet shut down, as NVML counts them */, cuda_driver = 12040;
static nvmlReturn_t init_error = 0;
static char driver_version[80] = "550.54.15", nvml_version[80] = "12.550.54.15";
static err_t E[MAXERR];
static int nerr = 0;
static unsigned long long ncalls = 0;

/* ---- scenario control (called by the tests through ctypes) ---------------------------------------- */
int stub_reset(int n) {
    nerr = 0; initialized = 0; init_error = 0; ncalls = 0;
    n = n < 0 ? 0 : (n > MAXG ? MAXG : n);
    int want = n < 16 ? 16 : n;
    if (want > cap) {   /* handles are pointers into H: reallocated only here, before any handle is given */
        gpu_t *g = realloc(G, (size_t)want * sizeof *G);
        handle_t (*h)[MAXMIG + 1] = realloc(H, (size_t)want * sizeof *H);
        if (g) G = g;
        if (h) H = h;
        if (!g || !h) { ngpu = 0; return -1; }
        cap = want;
    }
    ngpu = n;
    memset(G, 0, (size_t)cap * sizeof *G);
    for (int i = 0; i < cap; i++) {
        G[i].v[K_PROC_STRUCT_BYTES] = sizeof(nvmlProcessInfo_v2_t); G[i].v[K_MEM_V2] = 1;
        for (int m = 0; m <= MAXMIG; m++) { H[i][m].gpu = i; H[i][m].mig = m - 1; }
    }
    return n;
}
int stub_set(int gpu, const char *key, unsigned long long value) {
    if (gpu < 0 || gpu >= cap) return -1;
    for (int k = 0; k < NKEYS; k++) if (!strcmp(KEYS[k], key)) { G[gpu].v[k] = value; return 0; }
    return -1;
}
int stub_set_str(int gpu, const char *key, const char *value) {
    char *dst; size_t n;
    if (gpu < 0) {
        if (!strcmp(key, "driver_version")) { dst = driver_version; n = sizeof driver_version; }
        else if (!strcmp(key, "nvml_version")) { dst = nvml_version; n = sizeof nvml_version; }
        else return -1;
    } else if (gpu >= cap) return -1;
    else if (!strcmp(key, "name")) { dst = G[gpu].name; n = sizeof G[gpu].name; }
    else if (!strcmp(key, "uuid")) { dst = G[gpu].uuid; n = sizeof G[gpu].uuid; }
    else if (!strcmp(key, "pci_bus_id")) { dst = G[gpu].bus; n = sizeof G[gpu].bus; }
    else return -1;
    snprintf(dst, n, "%s", value);
    return 0;
}
void stub_set_system(int cuda_driver_version, int init_err) { cuda_driver = cuda_driver_version; init_error = init_err; }
int stub_add_process(int gpu, unsigned int pid, unsigned long long used) {
    if (gpu < 0 || gpu >= cap || G[gpu].nproc >= MAXP) return -1;
    G[gpu].pid[G[gpu].nproc] = pid; G[gpu].pmem[G[gpu].nproc] = used; G[gpu].nproc++;
    return 0;
}
void stub_clear_processes(int gpu) { if (gpu >= 0 && gpu < cap) G[gpu].nproc = 0; }
int stub_add_mig(int gpu, const char *uuid, unsigned long long total, unsigned long long used) {
    if (gpu < 0 || gpu >= cap || G[gpu].nmig >= MAXMIG) return -1;
    mig_t *m = &G[gpu].mig[G[gpu].nmig++];
    snprintf(m->uuid, sizeof m->uuid, "%s", uuid); m->total = total; m->used = used;
    return 0;
}
/* From now on function `fn` on GPU `gpu` returns `code` (gpu -1: every GPU). */
int stub_set_error(int gpu, const char *fn, int code) {
    if (nerr >= MAXERR) return -1;
    E[nerr].gpu = gpu; snprintf(E[nerr].fn, sizeof E[nerr].fn, "%s", fn); E[nerr].code = code; nerr++;
    return 0;
}
unsigned long long stub_calls(void) { return ncalls; }

/* ---- helpers ---------------------------------------------------------------------------------------- */
static nvmlReturn_t enter(const char *fn, const handle_t *h) {
    ncalls++;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (h == NULL) {
        for (int i = 0; i < nerr; i++) if (E[i].gpu < 0 && !strcmp(E[i].fn, fn)) return E[i].code;
        return NVML_SUCCESS;
    }
    if (h->gpu < 0 || h->gpu >= ngpu) return NVML_ERROR_INVALID_ARGUMENT;
    if (G[h->gpu].v[K_LOST]) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < nerr; i++)
        if ((E[i].gpu < 0 || E[i].gpu == h->gpu) && !strcmp(E[i].fn, fn)) return E[i].code;
    return NVML_SUCCESS;
}
#define ENTER(fn, h) do { nvmlReturn_t r_ = enter(fn, (const handle_t *)(h)); if (r_) return r_; } while (0)
#define V(h, k) (G[((const handle_t *)(h))->gpu].v[k])

static nvmlReturn_t copy_str(char *dst, unsigned int len, const char *src) {
    if (dst == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- NVML API ---------------------------------------------------------------------------------------- */
const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags; ncalls++;
    if (init_error) return init_error;
    initialized++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
/* NVML counts initialisations: a library that shuts down leaves the others' initialisation in place. */
nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized--; return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    ENTER("nvmlSystemGetDriverVersion", NULL); return copy_str(v, len, driver_version);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    ENTER("nvmlSystemGetNVMLVersion", NULL); return copy_str(v, len, nvml_version);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER("nvmlSystemGetCudaDriverVersion", NULL); *v = cuda_driver; return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { ENTER("nvmlDeviceGetCount", NULL); *n = ngpu; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, handle_t **h) {
    ENTER("nvmlDeviceGetHandleByIndex", NULL);
    if (i >= (unsigned)ngpu) return NVML_ERROR_INVALID_ARGUMENT;
    if (G[i].v[K_LOST]) return NVML_ERROR_GPU_IS_LOST;
    *h = &H[i][0];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(handle_t *h, char *name, unsigned int len) {
    ENTER("nvmlDeviceGetName", h); return copy_str(name, len, G[h->gpu].name);
}
nvmlReturn_t nvmlDeviceGetUUID(handle_t *h, char *uuid, unsigned int len) {
    ENTER("nvmlDeviceGetUUID", h);
    return copy_str(uuid, len, h->mig >= 0 ? G[h->gpu].mig[h->mig].uuid : G[h->gpu].uuid);
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(handle_t *h, nvmlPciInfo_t *p) {
    ENTER("nvmlDeviceGetPciInfo", h);
    memset(p, 0, sizeof *p);
    snprintf(p->busId, sizeof p->busId, "%s", G[h->gpu].bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%s", strlen(G[h->gpu].bus) > 4 ? G[h->gpu].bus + 4 : "");
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(handle_t *h, int *major, int *minor) {
    ENTER("nvmlDeviceGetCudaComputeCapability", h);
    *major = (int)V(h, K_CC_MAJOR); *minor = (int)V(h, K_CC_MINOR); return NVML_SUCCESS;
}
/* Legacy v1: `used` counts the driver's reserved memory (what drivers >= R510 still answer here). */
nvmlReturn_t nvmlDeviceGetMemoryInfo(handle_t *h, nvmlMemory_t *m) {
    ENTER("nvmlDeviceGetMemoryInfo", h);
    if (h->mig >= 0) {
        mig_t *d = &G[h->gpu].mig[h->mig];
        m->total = d->total; m->used = d->used; m->free = d->total - d->used; return NVML_SUCCESS;
    }
    m->total = V(h, K_MEM_TOTAL); m->used = V(h, K_MEM_USED) + V(h, K_MEM_RESERVED); m->free = m->total - m->used;
    return NVML_SUCCESS;
}
/* v2 (drivers >= R510): reserved apart, used without it, as nvidia-smi prints. Older drivers: not found. */
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(handle_t *h, nvmlMemory_v2_t *m) {
    ENTER("nvmlDeviceGetMemoryInfo_v2", h);
    if (!V(h, K_MEM_V2)) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (m->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (h->mig >= 0) {
        mig_t *d = &G[h->gpu].mig[h->mig];
        m->total = d->total; m->reserved = 0; m->used = d->used; m->free = d->total - d->used; return 0;
    }
    m->total = V(h, K_MEM_TOTAL); m->reserved = V(h, K_MEM_RESERVED); m->used = V(h, K_MEM_USED);
    m->free = m->total - m->reserved - m->used;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetUtilizationRates(handle_t *h, nvmlUtilization_t *u) {
    ENTER("nvmlDeviceGetUtilizationRates", h);
    u->gpu = (unsigned)V(h, K_UTIL_GPU); u->memory = (unsigned)V(h, K_UTIL_MEM); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(handle_t *h, int sensor, unsigned int *t) {
    ENTER("nvmlDeviceGetTemperature", h);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *t = (unsigned)V(h, K_TEMP); return NVML_SUCCESS;
}
#define UINT_GETTER(fn, key) \
    nvmlReturn_t fn(handle_t *h, unsigned int *out) { ENTER(#fn, h); *out = (unsigned)V(h, key); return 0; }
UINT_GETTER(nvmlDeviceGetPowerUsage, K_POWER)
UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, K_POWER_LIMIT)
UINT_GETTER(nvmlDeviceGetFanSpeed, K_FAN)
UINT_GETTER(nvmlDeviceGetPerformanceState, K_PSTATE)
UINT_GETTER(nvmlDeviceGetPersistenceMode, K_PERSISTENCE)
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(handle_t *h, unsigned int *out) {
    ENTER("nvmlDeviceGetRetiredPagesPendingStatus", h);
    if (!V(h, K_ECC_CUR)) return NVML_ERROR_NOT_SUPPORTED;   /* no ECC memory (GeForce) */
    *out = (unsigned)V(h, K_RETIRED_PENDING); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetClockInfo(handle_t *h, int type, unsigned int *mhz) {
    ENTER("nvmlDeviceGetClockInfo", h);
    if (type == 1) *mhz = (unsigned)V(h, K_CLOCK_SM);
    else if (type == 2) *mhz = (unsigned)V(h, K_CLOCK_MEM);
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(handle_t *h, int type, unsigned int *mhz) {
    ENTER("nvmlDeviceGetMaxClockInfo", h);
    if (type == 1) *mhz = (unsigned)V(h, K_MAX_CLOCK_SM);
    else if (type == 2) *mhz = (unsigned)V(h, K_MAX_CLOCK_MEM);
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(handle_t *h, unsigned long long *r) {
    ENTER("nvmlDeviceGetCurrentClocksEventReasons", h); *r = V(h, K_THROTTLE); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(handle_t *h, unsigned long long *r) {
    ENTER("nvmlDeviceGetCurrentClocksThrottleReasons", h); *r = V(h, K_THROTTLE); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigMode(handle_t *h, unsigned int *cur, unsigned int *pend) {
    ENTER("nvmlDeviceGetMigMode", h);
    *cur = (unsigned)V(h, K_MIG_CUR); *pend = (unsigned)V(h, K_MIG_PEND); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(handle_t *h, unsigned int *n) {
    ENTER("nvmlDeviceGetMaxMigDeviceCount", h); *n = V(h, K_MIG_CUR) ? MAXMIG : 0; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(handle_t *h, unsigned int i, handle_t **out) {
    ENTER("nvmlDeviceGetMigDeviceHandleByIndex", h);
    if (i >= (unsigned)G[h->gpu].nmig) return NVML_ERROR_NOT_FOUND;
    *out = &H[h->gpu][i + 1];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEccMode(handle_t *h, unsigned int *cur, unsigned int *pend) {
    ENTER("nvmlDeviceGetEccMode", h);
    if (!V(h, K_ECC_CUR)) return NVML_ERROR_NOT_SUPPORTED;   /* no ECC memory (GeForce) */
    *cur = (unsigned)V(h, K_ECC_CUR); *pend = (unsigned)V(h, K_ECC_PEND); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTotalEccErrors(handle_t *h, int errorType, int counterType, unsigned long long *n) {
    ENTER("nvmlDeviceGetTotalEccErrors", h);
    if (!V(h, K_ECC_CUR)) return NVML_ERROR_NOT_SUPPORTED;
    if (errorType != 1) { *n = 0; return NVML_SUCCESS; }  /* corrected errors: not modelled */
    *n = counterType == 0 ? V(h, K_ECC_VOL_UNC) : V(h, K_ECC_AGG_UNC);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetRemappedRows(handle_t *h, unsigned int *corr, unsigned int *unc, unsigned int *pending,
                                       unsigned int *failure) {
    ENTER("nvmlDeviceGetRemappedRows", h);
    if (!V(h, K_ECC_CUR)) return NVML_ERROR_NOT_SUPPORTED;
    *corr = (unsigned)V(h, K_REMAP_CORR); *unc = (unsigned)V(h, K_REMAP_UNC);
    *pending = (unsigned)V(h, K_REMAP_PENDING); *failure = (unsigned)V(h, K_REMAP_FAILURE);
    return NVML_SUCCESS;
}

/* Process lists. `elem` is the element size the driver writes: 16 (v1 layout) or 24 (v2/v3). A scenario may set
 * proc_struct_bytes to a size other than what the binding allocated: that is the binding/driver mismatch that
 * turns into garbage pids and memory on real machines. */
static nvmlReturn_t procs(const char *fn, handle_t *h, unsigned int *count, void *infos, size_t elem, int graphics) {
    ENTER(fn, h);
    gpu_t *g = &G[h->gpu];
    unsigned int n = graphics ? 0 : (unsigned)g->nproc;
    if (infos == NULL || *count < n) { unsigned int need = n; *count = need; return need ? NVML_ERROR_INSUFFICIENT_SIZE : 0; }
    *count = n;
    unsigned char *out = infos;
    for (unsigned int i = 0; i < n; i++) {
        if (elem == sizeof(nvmlProcessInfo_v1_t)) {
            nvmlProcessInfo_v1_t p = {g->pid[i], g->pmem[i]};
            memcpy(out + i * elem, &p, sizeof p);
        } else {
            nvmlProcessInfo_v2_t p = {g->pid[i], g->pmem[i], 0xFFFFFFFFu, 0xFFFFFFFFu};
            memcpy(out + i * elem, &p, elem < sizeof p ? elem : sizeof p);
        }
    }
    return NVML_SUCCESS;
}
#define PROCS(fn, elem, gr) \
    nvmlReturn_t fn(handle_t *h, unsigned int *c, void *i) { return procs(#fn, h, c, i, elem, gr); }
PROCS(nvmlDeviceGetComputeRunningProcesses, sizeof(nvmlProcessInfo_v1_t), 0)
PROCS(nvmlDeviceGetComputeRunningProcesses_v2, sizeof(nvmlProcessInfo_v2_t), 0)
PROCS(nvmlDeviceGetGraphicsRunningProcesses, sizeof(nvmlProcessInfo_v1_t), 1)
PROCS(nvmlDeviceGetGraphicsRunningProcesses_v2, sizeof(nvmlProcessInfo_v2_t), 1)
PROCS(nvmlDeviceGetGraphicsRunningProcesses_v3, sizeof(nvmlProcessInfo_v2_t), 1)
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(handle_t *h, unsigned int *c, void *i) {
    unsigned long long elem = i == NULL ? sizeof(nvmlProcessInfo_v2_t) : G[h->gpu].v[K_PROC_STRUCT_BYTES];
    return procs("nvmlDeviceGetComputeRunningProcesses_v3", h, c, i, (size_t)elem, 0);
}

/* ---- what nvitop and gpustat call besides ------------------------------------------------------------ */
nvmlReturn_t nvmlDeviceGetIndex(handle_t *h, unsigned int *i) { ENTER("nvmlDeviceGetIndex", h); *i = h->gpu; return 0; }
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(handle_t *h, unsigned int *is_mig) {
    ENTER("nvmlDeviceIsMigDeviceHandle", h); *is_mig = h->mig >= 0; return NVML_SUCCESS;
}
/* Encoder/decoder utilisation (%) and the sampling period NVML averages over (us). */
static nvmlReturn_t codec(const char *fn, handle_t *h, int key, unsigned int *util, unsigned int *period_us) {
    ENTER(fn, h); *util = (unsigned)V(h, key); *period_us = 167000; return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetEncoderUtilization(handle_t *h, unsigned int *u, unsigned int *p) {
    return codec("nvmlDeviceGetEncoderUtilization", h, K_ENC_UTIL, u, p);
}
nvmlReturn_t nvmlDeviceGetDecoderUtilization(handle_t *h, unsigned int *u, unsigned int *p) {
    return codec("nvmlDeviceGetDecoderUtilization", h, K_DEC_UTIL, u, p);
}
/* counter 0: TX, 1: RX, in KB/s */
nvmlReturn_t nvmlDeviceGetPcieThroughput(handle_t *h, int counter, unsigned int *kbps) {
    ENTER("nvmlDeviceGetPcieThroughput", h);
    if (counter != 0 && counter != 1) return NVML_ERROR_INVALID_ARGUMENT;
    *kbps = (unsigned)V(h, counter == 0 ? K_PCIE_TX : K_PCIE_RX); return NVML_SUCCESS;
}
UINT_GETTER(nvmlDeviceGetComputeMode, K_COMPUTE_MODE)
UINT_GETTER(nvmlDeviceGetDisplayMode, K_DISPLAY_MODE)
UINT_GETTER(nvmlDeviceGetDisplayActive, K_DISPLAY_ACTIVE)
/* What nvidia-smi calls the power limit set by the administrator: the enforced limit here. */
UINT_GETTER(nvmlDeviceGetPowerManagementLimit, K_POWER_LIMIT)
/* Windows only: a scenario's driver_model is stored as NVML_DRIVER_* + 1; 0 (Linux) answers "not supported". */
static nvmlReturn_t driver_model(const char *fn, handle_t *h, unsigned int *cur, unsigned int *pend) {
    ENTER(fn, h);
    if (!V(h, K_DRIVER_MODEL)) return NVML_ERROR_NOT_SUPPORTED;
    *cur = (unsigned)V(h, K_DRIVER_MODEL) - 1; *pend = (unsigned)V(h, K_DRIVER_MODEL_PEND); return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetDriverModel(handle_t *h, unsigned int *c, unsigned int *p) {
    return driver_model("nvmlDeviceGetDriverModel", h, c, p);
}
nvmlReturn_t nvmlDeviceGetDriverModel_v2(handle_t *h, unsigned int *c, unsigned int *p) {
    return driver_model("nvmlDeviceGetDriverModel_v2", h, c, p);
}
/* nvmlTemperature_v1_t: version 0x100000C, sensorType, temperature (degrees C) */
typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_v1_t;
nvmlReturn_t nvmlDeviceGetTemperatureV(handle_t *h, nvmlTemperature_v1_t *t) {
    ENTER("nvmlDeviceGetTemperatureV", h);
    if (t->version != 0x100000Cu) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (t->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    t->temperature = (int)V(h, K_TEMP); return NVML_SUCCESS;
}
/* No confidential-computing GPU is played. */
nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(handle_t *h, void *info) {
    (void)info; ENTER("nvmlDeviceGetConfComputeMemSizeInfo", h); return NVML_ERROR_NOT_SUPPORTED;
}
/* One sample per listed compute process, newer than the timestamp asked for: the GPU's SM, memory, encoder and
 * decoder utilisation. No process: NVML's NOT_FOUND (no samples). */
typedef struct { unsigned int pid; unsigned long long timeStamp; unsigned int smUtil, memUtil, encUtil, decUtil; }
    nvmlProcessUtilizationSample_t;
nvmlReturn_t nvmlDeviceGetProcessUtilization(handle_t *h, nvmlProcessUtilizationSample_t *s, unsigned int *count,
                                             unsigned long long last_seen_us) {
    ENTER("nvmlDeviceGetProcessUtilization", h);
    gpu_t *g = &G[h->gpu];
    unsigned int n = (unsigned)g->nproc;
    if (n == 0) { *count = 0; return NVML_ERROR_NOT_FOUND; }
    if (s == NULL || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    *count = n;
    for (unsigned int i = 0; i < n; i++) {
        s[i].pid = g->pid[i]; s[i].timeStamp = last_seen_us + 1;
        s[i].smUtil = (unsigned)g->v[K_UTIL_GPU]; s[i].memUtil = (unsigned)g->v[K_UTIL_MEM];
        s[i].encUtil = (unsigned)g->v[K_ENC_UTIL]; s[i].decUtil = (unsigned)g->v[K_DEC_UTIL];
    }
    return NVML_SUCCESS;
}
/* Exported because nvitop picks its process structure by which functions exist: with ConfComputeMemSizeInfo but
 * without this one it assumes the short-lived 32-byte v3 layout (driver 535), while this stand-in writes nvml.h's
 * 24-byte v3 elements (driver >= 550). The detail list itself is not modelled. */
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(handle_t *h, void *list) {
    (void)list; ENTER("nvmlDeviceGetRunningProcessDetailList", h); return NVML_ERROR_NOT_SUPPORTED;
}
