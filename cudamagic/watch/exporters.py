"""Exporter metric maps for ``%gpuwatch --source prometheus://...`` (data, no logic).

Three exporters are understood, recognised by their metric names:

* NVIDIA's DCGM exporter (``dcgm-exporter``): ``DCGM_FI_DEV_*`` fields, one series per GPU with the
    labels
  ``gpu`` (0-based index), ``UUID``, ``modelName``, ``Hostname`` (older releases) or ``hostname``
  (newer), ``GPU_I_ID``/``GPU_I_PROFILE`` for a MIG instance, ``pod``/``namespace``/``container``
  when it maps GPUs to Kubernetes pods and ``hpc_job`` when it maps them to HPC (Slurm) jobs. Memory
  is in MiB, power in W, clocks in MHz; ``DCGM_FI_PROF_*`` are ratios 0-1 (not percent).
* the DCGM exporter's older generation (gpu-monitoring-tools, ``pod-gpu-metrics-exporter``):
  ``dcgm_*`` names (``dcgm_gpu_utilization``, ``dcgm_fb_used``), labels ``gpu``, ``uuid``,
  ``pod_name``; read as the equivalent ``DCGM_FI_DEV_*`` fields.
* nvitop's exporter (``nvitop-exporter``): ``gpu_*`` gauges whose names end in their unit
  (``gpu_utilization_Percentage``, ``gpu_memory_used_MiB``) with the labels ``hostname``, ``index``,
  ``devicename``, ``uuid``.

Each map is ``metric name -> (field, scale)``: ``field`` is the nvidia-smi key of
:data:`cudamagic.watch.samples.GPU_FIELDS` (or a profiling ratio name) and ``scale`` converts the
exporter's unit to the raw unit of the sample (bytes, mW, %, MHz).
"""

from __future__ import annotations

MIB = 1024**2

# : DCGM exporter: metric -> (nvidia-smi field, factor to the sample's raw unit). The
# ``memory.free`` and
#: ``memory.reserved`` entries are combined into ``memory.total`` (used + free + reserved).
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization.gpu", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("utilization.memory", 1),
    "DCGM_FI_DEV_FB_USED": ("memory.used", MIB),
    "DCGM_FI_DEV_FB_FREE": ("memory.free", MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("memory.reserved", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("memory.total", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature.gpu", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power.draw", 1000),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power.limit", 1000),
    "DCGM_FI_DEV_FAN_SPEED": ("fan.speed", 1),
    "DCGM_FI_DEV_SM_CLOCK": ("clocks.sm", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("clocks.mem", 1),
    "DCGM_FI_DEV_PSTATE": ("pstate", 1),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clocks_event_reasons.active", 1),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clocks_event_reasons.active", 1),
}

#: The older exporter generation (gpu-monitoring-tools' ``dcgm-exporter`` script and
#: ``pod-gpu-metrics-exporter``, labels ``gpu``, ``uuid``, ``pod_name``...): ``dcgm_<name>``, one
#: name per ``DCGM_FI_DEV_*`` field, same units. ``dcgm_fb_used`` there is NVML's v1 reading (the
#: driver's reserve included) and no reserve is exported.
LEGACY_DCGM_FIELDS = {
    "dcgm_gpu_utilization": ("utilization.gpu", 1),
    "dcgm_mem_copy_utilization": ("utilization.memory", 1),
    "dcgm_fb_used": ("memory.used", MIB),
    "dcgm_fb_free": ("memory.free", MIB),
    "dcgm_fb_total": ("memory.total", MIB),
    "dcgm_gpu_temp": ("temperature.gpu", 1),
    "dcgm_power_usage": ("power.draw", 1000),
    "dcgm_sm_clock": ("clocks.sm", 1),
    "dcgm_memory_clock": ("clocks.mem", 1),
    "dcgm_mem_clock": ("clocks.mem", 1),
}

#: DCGM profiling fields: ratios 0-1 over the scrape interval, kept apart from utilization percent.
DCGM_PROF_FIELDS = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "gr_engine_active",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
}

#: nvitop exporter: metric -> (nvidia-smi field, factor).
NVITOP_FIELDS = {
    "gpu_utilization_Percentage": ("utilization.gpu", 1),
    "gpu_memory_utilization_Percentage": ("utilization.memory", 1),
    "gpu_memory_used_MiB": ("memory.used", MIB),
    "gpu_memory_total_MiB": ("memory.total", MIB),
    "gpu_temperature_C": ("temperature.gpu", 1),
    "gpu_power_usage_W": ("power.draw", 1000),
    "gpu_power_limit_W": ("power.limit", 1000),
    "gpu_fan_speed_Percentage": ("fan.speed", 1),
    "gpu_clock_sm_MHz": ("clocks.sm", 1),
    "gpu_clock_memory_MHz": ("clocks.mem", 1),
}

#: Metric name prefixes of GPU exporters cudamagic does not read, with what they are (named when
#: a server has no metric cudamagic reads).
OTHER_EXPORTERS = (
    ("DCGM_FI_", "dcgm-exporter fields cudamagic does not map"),
    ("dcgm_", "an older DCGM exporter generation's fields cudamagic does not map"),
    ("nvidia_smi_", "utkuozdemir/nvidia_gpu_exporter (nvidia-smi based)"),
    ("nvidia_gpu_", "an NVML exporter (nvidia_gpu_prometheus_exporter or gpu_exporter)"),
    ("gpu_", "an exporter with gpu_* names (nvitop-exporter names end in their unit)"),
)
#: PromQL of the one extra query made when nothing known is found: series per GPU-looking name.
OTHER_QUERY = 'count by (__name__) ({__name__=~"(?i)(dcgm|nvidia|gpu)_.+"})'

# : Labels naming the host, in the order they are tried (DCGM older, DCGM newer / nvitop, the scrape
# target).
HOST_LABELS = ("Hostname", "hostname", "instance")
#: Labels naming the GPU's 0-based index.
INDEX_LABELS = ("gpu", "index")
UUID_LABELS = ("UUID", "uuid")
NAME_LABELS = ("modelName", "devicename")
#: Labels naming a MIG instance (DCGM): GPU instance id and profile.
MIG_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")
# : Labels tying a GPU to a job, in the order ``--job`` tries them, with the environment variable it
# reads.
JOB_LABELS = (
    ("hpc_job", "SLURM_JOB_ID"),
    ("slurm_job_id", "SLURM_JOB_ID"),
    ("pod", "POD_NAME"),
    ("exported_pod", "POD_NAME"),
    ("pod_name", "POD_NAME"),
)

# : DCGM's blank-value sentinels (dcgm_structs.h) as Prometheus (float64) stores them: value ->
# reason.
# : INT64 sentinels (0x7ffffffffffffff0 + k) all round to 2**63 in a float64, hence one entry for
# them.
DCGM_SENTINELS = {
    float(0x7FFFFFF0): ("DCGM blank value: no data yet", "blank"),
    float(0x7FFFFFF1): ("DCGM: field not found", "not_found"),
    float(0x7FFFFFF2): ("DCGM: not supported on this GPU", "not_supported"),
    float(0x7FFFFFF3): ("DCGM: no permission to read it", "no_permission"),
    float(2**47): ("DCGM blank value: no data yet", "blank"),
    float(2**47 + 1): ("DCGM: field not found", "not_found"),
    float(2**47 + 2): ("DCGM: not supported on this GPU", "not_supported"),
    float(2**47 + 3): ("DCGM: no permission to read it", "no_permission"),
    float(0x7FFFFFFFFFFFFFF0): ("DCGM blank value (64-bit sentinel)", "blank"),
}


def all_metric_names() -> list:
    """Every metric name an instant query asks for (both exporters), sorted."""
    return sorted({*DCGM_FIELDS, *LEGACY_DCGM_FIELDS, *DCGM_PROF_FIELDS, *NVITOP_FIELDS})
