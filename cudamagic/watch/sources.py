"""Where ``%gpuwatch`` samples come from.

Where ``%gpuwatch`` samples come from: the live machine (NVML, ``psutil``, the PyTorch allocator) or
a replayed trace file.

A source has ``read(seq, timestamp_s) -> Sample``, ``label``, ``devices`` and ``status``; the
:class:`~.sampler.Sampler` calls ``read`` once per tick. :class:`LiveSource` never raises for NVML
faults (the sample carries NA values with the reason); :class:`ReplaySource` raises
:class:`EndOfTrace` after the last recorded sample.

``torch`` is only looked at when the user already imported it *and* initialised CUDA
(``torch.cuda.is_initialized()``): the monitor never creates a CUDA context.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import time

import psutil

from ..core import nvml, platform, wincounters
from ..core.fmt import plural
from ..core.na import NA, is_na
from . import memwarn, trace
from .samples import (
    GPU_FIELDS,
    GpuSample,
    HostSample,
    MigSample,
    ProcessSample,
    Sample,
    TorchSample,
    WorkerSample,
)

OTHER_NAMESPACE = NA(
    "process in another PID namespace (container): its pid does not exist here; run the "
    "container with --pid=host to see its name",
    "other_namespace",
)
HIDDEN = NA(
    "another user's process, hidden: the pid exists here but /proc does not let this user read it "
    "(/proc mounted with hidepid, or permissions); its GPU memory is real; `sudo nvidia-smi` or "
    "the "
    "administrator can name it",
    "hidden",
)
EXITED = NA("the process exited between NVML's listing and reading its name", "exited")
PRIVATE_CMDLINE = NA(
    "another user's command line, not shown (privacy on shared machines): `%gpuwatch "
    "--cmdline` or `%config CudaMagics.watch_show_cmdlines = True` shows it",
    "private",
)
UNKNOWN_OWNER_CMDLINE = NA(
    "command line not shown: this process's owner cannot be read from here (Windows denies "
    "it for other users' and system processes), so it is treated as another user's "
    "(privacy on shared machines): `%gpuwatch --cmdline` shows it",
    "private",
)
MIG_UTIL = NA("not reported in MIG mode", "mig")


class EndOfTrace(Exception):
    """Raised by :meth:`ReplaySource.read` after the last recorded sample."""


class Source:
    """Where a monitor's samples come from: the interface the sampler and the monitor use.

    Attributes:
        label: what the status line calls it (``"live"``, ``"replay of PATH"``).
        devices: the GPUs shown (0-based NVML indices; ``(host, index)`` for a cluster).
        status: None when the source works, else the NA that says why there is no GPU data.
    """

    label = "live"
    devices: list = []
    status = None

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """One sample; :class:`EndOfTrace` after a replay's last."""
        raise NotImplementedError

    def preload(self, history_len: int) -> list:
        """Older samples a new monitor starts with (oldest first); none by default."""
        return []

    def close(self) -> None:
        """Release what the source holds (a cluster source's connections)."""


# ---- host -------------------------------------------------------------------------------


def _cpu_busy_total(times):
    total = sum(times)
    idle = getattr(times, "idle", 0.0) + getattr(times, "iowait", 0.0)
    return total - idle, total


# : Command-line marks of multiprocessing's own helper processes, which are not DataLoader workers:
# the resource
# : tracker that the first spawn/forkserver start leaves running for the kernel's life (POSIX), and
# the forkserver.
_MP_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


#: Seconds between two listings of the kernel's child processes (one file per kernel thread).
CHILD_LISTING_S = 1.0


class HostReader:
    """Reads the host (``/proc`` on Linux, else psutil); keeps the last CPU times for deltas.

    CPU % needs two readings at least 0.05 s apart; before that it is NA. DataLoader workers
    are this kernel's child processes that run Python's multiprocessing (``spawn``/``forkserver``
    command lines) or share the kernel's command line (``fork``). The children are listed at
    most every :data:`CHILD_LISTING_S` (a new worker shows within a second); the CPU and memory
    of those listed are read at every reading, and one that exited is dropped at once.
    """

    def __init__(self, pid: int | None = None, clock=time.monotonic):
        self._clock = clock
        self.pid = os.getpid() if pid is None else pid
        try:
            self._proc = psutil.Process(self.pid)
            self._cmdline = self._proc.cmdline()
        except Exception:
            self._proc, self._cmdline = None, []
        self._last = None
        self._last_child = {}
        self._known = {}
        self._listed = (float("-inf"), ())  # (clock, pids) of the last listing of the children
        self._cpu_count = psutil.cpu_count() or NA("unknown", "error")
        self._files = platform.proc_files()
        self.prime()

    def close(self) -> None:
        """Close the ``/proc`` files kept open (later readings ask psutil)."""
        files, self._files = self._files, None
        if files is not None:
            files.close()
            t, _, _, own = self._last
            self._last = (t, None, None, own)  # psutil counts seconds: the next CPU % warms up

    def _cpu_busy_total(self) -> tuple:
        """``(busy, total)`` CPU time of all CPUs (ticks from /proc, else psutil's seconds)."""
        if self._files is not None:
            try:
                return self._files.cpu_busy_total()
            except (OSError, ValueError, IndexError):
                self.close()  # psutil from now on (in seconds: the next CPU % warms up)
                raise
        return _cpu_busy_total(psutil.cpu_times())

    def _memory(self) -> tuple:
        """``(used, total)`` bytes of host RAM (used: total - available, as psutil counts it)."""
        if self._files is not None:
            try:
                got = self._files.memory()
            except (OSError, ValueError, IndexError):
                got = None
            if got is not None:
                return got
        vm = psutil.virtual_memory()
        return int(vm.total - vm.available), int(vm.total)

    def prime(self):
        """Take the reference reading that the next :meth:`read` compares against."""
        try:
            busy, total = self._cpu_busy_total()
            own = self._own_cpu_s()
        except Exception:
            busy = total = own = None
        self._last = (self._clock(), busy, total, own)

    def _own_cpu_s(self):
        """User + system CPU seconds of the watched process (``os.times`` for this one)."""
        if self.pid == os.getpid():
            return sum(os.times()[:2])
        return sum(self._proc.cpu_times()[:2]) if self._proc is not None else None

    def _workers(self, dt, now):
        if self._proc is None:
            return ()
        if now - self._listed[0] >= CHILD_LISTING_S:
            try:
                self._listed = (now, platform.child_pids(self.pid, self._proc))
            except Exception:
                return ()
        known = {}
        out, seen = [], {}
        for pid in sorted(self._listed[1]):
            entry = self._known.get(pid)
            if entry is None:  # classify once per pid: the command line does not change
                try:
                    child = psutil.Process(pid)
                    cmd = child.cmdline()
                    entry = (
                        child,
                        cmd == self._cmdline
                        or (
                            any("multiprocessing" in c for c in cmd)
                            and not any(helper in c for c in cmd for helper in _MP_HELPERS)
                        ),
                    )
                except Exception:
                    continue
            known[pid] = entry
            child, is_worker = entry
            if not is_worker:
                continue
            try:
                with child.oneshot():
                    cpu = sum(child.cpu_times()[:2])
                    rss = int(child.memory_info().rss)
            except Exception:
                continue
            prev = self._last_child.get(pid)
            seen[pid] = cpu
            pct = (
                NA("needs two readings", "warming_up")
                if prev is None or dt <= 0
                else round(max(0.0, 100.0 * (cpu - prev) / dt), 1)
            )
            out.append(WorkerSample(pid=pid, cpu_pct=pct, rss_bytes=rss))
        self._known = known
        self._last_child = seen
        return tuple(out)

    def read(self) -> HostSample:
        """One :class:`HostSample` (never raises)."""
        now = self._clock()
        t0, busy0, total0, own0 = self._last
        dt = now - t0
        warming = NA("needs two readings at least 0.05 s apart", "warming_up")
        try:
            busy, total = self._cpu_busy_total()
            cpu = (
                warming
                if busy0 is None or dt < 0.05 or total <= total0
                else round(min(100.0, max(0.0, 100.0 * (busy - busy0) / (total - total0))), 1)
            )
        except Exception as exc:
            busy = total = None
            cpu = NA(f"psutil.cpu_times failed: {exc}", "error")
        try:
            own = self._own_cpu_s()
            kcpu = (
                warming
                if own is None or own0 is None or dt < 0.05
                else round(max(0.0, 100.0 * (own - own0) / dt), 1)
            )
        except Exception as exc:
            own, kcpu = None, NA(f"psutil failed: {exc}", "error")
        try:
            used, tot = self._memory()
        except Exception as exc:
            used = tot = NA(f"psutil.virtual_memory failed: {exc}", "error")
        workers = self._workers(dt, now)
        if dt >= 0.05 or busy0 is None:
            self._last = (now, busy, total, own)
        return HostSample(
            cpu_util_pct=cpu,
            cpu_count=self._cpu_count,
            memory_used_bytes=used,
            memory_total_bytes=tot,
            kernel_cpu_pct=kcpu,
            workers=workers,
        )


# ---- PyTorch allocator (never creates a CUDA context) ------------------------------------


def read_torch_allocator():
    """This kernel's PyTorch caching allocator, summed over CUDA devices, or NA.

    Reads ``torch.cuda.memory_stats(i)`` (``allocated_bytes.all.current``,
    ``reserved_bytes.all.current``, ``allocated_bytes.all.peak``) only if the user
    already imported torch and ``torch.cuda.is_initialized()`` is True.

    Returns:
        TorchSample (bytes; ``nvml_process_bytes``/``gap_bytes`` filled in by the source) or NA.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return NA("PyTorch is not imported in this kernel", "no_torch")
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():
            return NA(
                "CUDA is not initialised in this kernel (the monitor never creates a CUDA context)",
                "not_initialized",
            )
        alloc = reserved = peak = 0
        for i in range(cuda.device_count()):
            st = cuda.memory_stats(i)
            alloc += int(st.get("allocated_bytes.all.current", 0))
            reserved += int(st.get("reserved_bytes.all.current", 0))
            peak += int(st.get("allocated_bytes.all.peak", 0))
    except Exception as exc:
        return NA(f"PyTorch allocator not readable: {type(exc).__name__}: {exc}", "error")
    return TorchSample(allocated_bytes=alloc, reserved_bytes=reserved, peak_bytes=peak)


# ---- processes ----------------------------------------------------------------------------

INSUFFICIENT_PERMISSIONS = NA(
    "a process of another user or of the system: Windows does not show its name to "
    'this user (nvidia-smi prints "Insufficient Permissions"); run as administrator '
    "to see it",
    "no_permission",
)


def process_info(pid: int, *, host_namespace=None):
    """``(name, cmdline, visible)`` of process ``pid``.

    ``(name, cmdline, visible)`` for ``pid`` via psutil, telling apart why a name is not readable.

    * the pid exists here but cannot be read (``AccessDenied``, or ``NoSuchProcess`` while
        ``kill(pid, 0)``
      says EPERM: ``/proc`` mounted with ``hidepid=1``/``2``) -> name NA code ``"hidden"``, visible
          True;
    * the pid does not exist here: in another PID namespace (this kernel runs in a container, or its
        own pid
      is missing from NVML's list) -> ``"other_namespace"``, visible False; otherwise the
      process exited between NVML's listing and this read -> ``"exited"``, visible False.

    Args:
        pid: process id as NVML reports it.
        host_namespace: True when this kernel is known to share the host's PID namespace (its own
            pid is in NVML's list), False when known not to, None to guess with
            :func:`cudamagic.core.platform.in_container`.
    """
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            try:
                cmd = " ".join(p.cmdline())[:200]
            except psutil.AccessDenied:
                cmd = NA("permission denied reading the command line", "no_permission")
        return name, cmd, True
    except psutil.AccessDenied:
        na, visible = HIDDEN, True
    except psutil.NoSuchProcess:
        if platform.pid_exists(pid):
            na, visible = HIDDEN, True
        else:
            other = (not host_namespace) if host_namespace is not None else platform.in_container()
            na, visible = (OTHER_NAMESPACE if other else EXITED), False
    except Exception as exc:
        na = NA(f"psutil failed: {exc}", "error")
        return na, na, True
    if not platform.is_windows():
        return na, na, visible
    # Windows: no PID namespaces; NVML names what psutil cannot (nvmlSystemGetProcessName, as
    # nvidia-smi does)
    name = nvml.process_name(pid)
    if not is_na(name) and name:
        return name, NA("command line not readable from here", "no_permission"), True
    if na is HIDDEN or (is_na(name) and name.code == "no_permission"):
        return INSUFFICIENT_PERMISSIONS, INSUFFICIENT_PERMISSIONS, True
    return EXITED, EXITED, False


def idle_gpu_hint(gpus, host: HostSample, torch_state, own_on_gpu: bool) -> str:
    """Plain-words hint when the GPU sits idle while the CPU side is saturated, else ``""``.

    Fires only when this kernel uses a GPU (CUDA initialised, or its pid listed by NVML), every
    readable GPU is at most 30 % busy, and either all host CPUs are at least 90 % busy or this
    kernel's process uses a full core with no DataLoader workers.
    """
    if not (own_on_gpu or isinstance(torch_state, TorchSample)):
        return ""
    utils = [g.gpu_util_pct for g in gpus if not is_na(g.gpu_util_pct)]
    if not utils or max(utils) > 30:
        return ""
    cpu, kcpu = host.cpu_util_pct, host.kernel_cpu_pct
    if not is_na(cpu) and cpu >= 90:
        return (
            f"The GPU is nearly idle ({max(utils)} %) while the host CPUs are {cpu:.0f} % busy: "
            "the GPU is "
            "probably waiting for data. More DataLoader workers (num_workers), pin_memory=True or "
            "lighter "
            "CPU preprocessing usually help."
        )
    if not is_na(kcpu) and kcpu >= 90 and not host.workers:
        return (
            f"The GPU is nearly idle ({max(utils)} %) while this kernel's process keeps a CPU "
            "core busy "
            f"({kcpu:.0f} %) and has no DataLoader workers: loading data in the main process is "
            "probably "
            "the bottleneck. Try DataLoader(..., num_workers=4, pin_memory=True)."
        )
    return ""


# ---- sources ------------------------------------------------------------------------------

_READ_FIELDS = [f for f in GPU_FIELDS if f not in ("memory.total",)] + ["memory.total"]


class LiveSource(Source):
    """Reads the live machine: NVML, psutil, the PyTorch allocator.

    Reads the live machine: NVML (through :mod:`cudamagic.core.nvml`), psutil and the torch
    allocator.

    Args:
        devices: 0-based NVML indices to read, or None for all.
        host: a :class:`HostReader` (default: a new one for this process).
        torch_reader: callable returning a TorchSample or NA (default :func:`read_torch_allocator`).
        proc_info: callable ``pid -> (name, cmdline, visible)`` (default :func:`process_info`).
        pid: this kernel's pid (default ``os.getpid()``).
        show_cmdlines: also show other users' command lines (default False: their process names are
            shown, their command lines become :data:`PRIVATE_CMDLINE`; this user's processes always
            keep theirs).
        owner_is_me: callable ``pid -> bool | None``: True for this user's processes, None when the
            owner cannot be read (default :func:`cudamagic.core.platform.same_user`).
        counter_reader: callable returning ``{pid: ProcessGpuMemory}`` or NA (default
            :func:`cudamagic.core.wincounters.read_process_memory`): per-process GPU memory where
            NVML says N/A under WDDM, read at most once per tick and only then.

    NVML faults never raise: no driver gives ``nvml_status`` NA and no GPUs; unsupported
    fields are remembered by :class:`cudamagic.core.nvml.Device`; a lost GPU is marked lost.
    """

    kind = "live"

    def __init__(
        self,
        devices=None,
        *,
        host=None,
        torch_reader=read_torch_allocator,
        proc_info=process_info,
        pid=None,
        show_cmdlines=False,
        owner_is_me=platform.same_user,
        counter_reader=None,
    ):
        self.pid = os.getpid() if pid is None else pid
        self.show_cmdlines = show_cmdlines
        self.owner_is_me = owner_is_me
        self._mine = {}  # pid -> same_user(pid) (True, False, None: unknown), pruned like _names
        self.counter_reader = counter_reader or wincounters.read_process_memory
        self.status = nvml.init()
        count = 0
        if self.status is None:
            count = nvml.device_count()
            if is_na(count):
                self.status, count = count, 0
        self.device_count = count
        self.devices = list(range(count)) if devices is None else [int(d) for d in devices]
        self.host = host if host is not None else HostReader(self.pid)
        self.torch_reader = torch_reader
        self.proc_info = proc_info
        self._static = {}  # index -> (name, uuid, mig_enabled, driver model)
        self._names = {}  # pid -> (name, cmdline, visible), pruned to pids still listed
        # (index, pid) -> (what its ProcessSample was made of, that row); index -> the last rows:
        # a process that reads the same is the same object (a card compares it at once)
        self._rows = {}
        self._row_lists = {}
        self.label = "live"
        self.spill = memwarn.SpillWatch()
        self.growth = memwarn.AllocatorGrowth()

    def close(self) -> None:
        """Close the host reader's files (a stopped monitor reads no more)."""
        close = getattr(self.host, "close", None)
        if close is not None:
            close()

    def _static_facts(self, dev):
        facts = self._static.get(dev.index)
        if facts is None:
            got = dev.read(["name", "uuid", "mig.mode.current"])
            mig = got["mig.mode.current"]
            mig = (mig == "Enabled") if not is_na(mig) else False
            facts = (got["name"], got["uuid"], mig, dev.driver_model())
            if dev.lost is None:
                self._static[dev.index] = facts
        return facts

    def _processes(self, dev, names, counters):
        procs = dev.processes()
        if is_na(procs):
            return procs
        rows = []
        own_listed = any(p.pid == self.pid for p in procs)
        for p in procs:
            pid = p.pid
            info = self._names.get(pid)
            if info is None:
                info = (
                    self.proc_info(pid, host_namespace=True)
                    if own_listed and self.proc_info is process_info
                    else self.proc_info(pid)
                )
            names[pid] = info
            used, extra = p.used_memory_bytes, {}
            if is_na(used) and used.code == "wddm":  # Windows counts it where NVML cannot
                got = counters()
                if not is_na(got) and pid in got:
                    used = got[pid].dedicated_bytes
                    extra = {
                        "memory_source": wincounters.source_label(),
                        "shared_memory_bytes": got[pid].shared_bytes,
                    }
                elif not is_na(got):
                    used = NA(
                        f"{used.reason}; the Windows GPU Process Memory counters list no memory "
                        "for this "
                        "process",
                        "wddm",
                    )
                else:
                    used = NA(f"{used.reason}; {got.reason}", "wddm")
            fields = (pid, info[0], self._cmdline(pid, info[1]), used, p.type, bool(info[2]), extra)
            kept = self._rows.get((dev.index, pid))
            if kept is None or kept[0] != fields:  # else the same row: kept, compared at once
                row = ProcessSample(
                    pid=pid,
                    name=info[0],
                    cmdline=fields[2],
                    used_memory_bytes=used,
                    type=p.type,
                    own=(pid == self.pid),
                    visible=fields[5],
                    **extra,
                )
                kept = self._rows[(dev.index, pid)] = (fields, row)
            rows.append(kept[1])
        last = self._row_lists.get(dev.index)
        if last is not None and len(last) == len(rows) and all(map(operator.is_, last, rows)):
            return last
        rows = self._row_lists[dev.index] = tuple(rows)
        return rows

    def _cmdline(self, pid, cmdline):
        """``cmdline`` when it may be shown.

        This user's process, or ``show_cmdlines``; else PRIVATE_CMDLINE.
        """
        if self.show_cmdlines or pid == self.pid or is_na(cmdline):
            return cmdline
        if pid not in self._mine:
            self._mine[pid] = self.owner_is_me(pid)
        mine = self._mine[pid]
        if mine is None:
            return UNKNOWN_OWNER_CMDLINE
        return cmdline if mine else PRIVATE_CMDLINE

    def read_gpu(self, index, names, counters=None) -> GpuSample:
        """One :class:`GpuSample` for NVML index ``index`` (never raises)."""
        dev = nvml.device(index)
        name, uuid, mig, model = self._static_facts(dev)
        vals = dev.read(_READ_FIELDS)
        mig_devs = ()
        if mig:
            vals["utilization.gpu"] = vals["utilization.memory"] = MIG_UTIL
            got = dev.mig_devices()
            if not is_na(got):
                mig_devs = tuple(
                    MigSample(
                        index=m["index"],
                        uuid=m["uuid"],
                        memory_used_bytes=m["memory.used"],
                        memory_total_bytes=m["memory.total"],
                    )
                    for m in got
                )
        procs = (
            self._processes(dev, names, counters or functools.cache(self.counter_reader))
            if dev.lost is None
            else dev.lost
        )
        return GpuSample(
            index=index,
            name=name,
            uuid=uuid,
            mig_enabled=mig,
            mig_devices=mig_devs,
            processes=procs,
            lost=dev.lost,
            driver_model=model,
            **{attr: vals[key] for key, attr in GPU_FIELDS.items()},
        )

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """Read everything once."""
        names = {}
        counters = functools.cache(self.counter_reader)  # read at most once a tick
        gpus = (
            tuple(self.read_gpu(i, names, counters) for i in self.devices)
            if self.status is None
            else ()
        )
        self._names = names
        self._mine = {pid: v for pid, v in self._mine.items() if pid in names}
        if len(self._rows) > len(names) * max(1, len(self.devices)):
            self._rows = {k: v for k, v in self._rows.items() if k[1] in names}
        host = self.host.read()
        torch_state = self.torch_reader()
        own = [
            p.used_memory_bytes
            for g in gpus
            if not is_na(g.processes)
            for p in g.processes
            if p.own
        ]
        if isinstance(torch_state, TorchSample):
            if own and not any(is_na(b) for b in own):
                nv = sum(own)
                gap = (
                    nv - torch_state.reserved_bytes
                    if not is_na(torch_state.reserved_bytes)
                    else torch_state.reserved_bytes
                )
            else:
                nv = gap = NA(
                    "this kernel's pid is not in NVML's process list (another PID namespace, "
                    "or NVML unavailable)",
                    "other_namespace",
                )
            torch_state = TorchSample(
                torch_state.allocated_bytes,
                torch_state.reserved_bytes,
                torch_state.peak_bytes,
                nv,
                gap,
            )
        hints = (
            self.spill.check(gpus),
            self.growth.check(torch_state),
            idle_gpu_hint(gpus, host, torch_state, bool(own)),
        )
        hint = " ".join(h for h in hints if h)
        return Sample(
            seq=seq,
            timestamp_s=timestamp_s,
            nvml_status=self.status,
            gpus=gpus,
            host=host,
            torch=torch_state,
            hint=hint,
        )


class ReplaySource(Source):
    """Plays the samples of a trace file (see :func:`.trace.read_trace`) one per :meth:`read`."""

    kind = "replay"

    def __init__(self, path: str):
        self.path = path
        # trace.MAX_TRACE_BYTES looked up at each call (tests lower it)
        self.header, self.samples = trace.read_trace(
            path, max_bytes=trace.MAX_TRACE_BYTES, tail=True
        )
        self.pos = 0
        self.devices = sorted({g.index for s in self.samples for g in s.gpus})
        self.device_count = len(self.devices)
        self.status = self.samples[0].nvml_status if self.samples else None
        skipped = self.header.get("skipped_bytes", 0)
        # a long --log run: only its end fits the replay memory bound; say so in the label
        self.label = f"replay of {path}" + (
            f" (last {plural(len(self.samples), 'sample')})" if skipped else ""
        )

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """The next recorded sample (its own recorded timestamp).

        :class:`EndOfTrace` after the last.
        """
        if self.pos >= len(self.samples):
            raise EndOfTrace()
        s = self.samples[self.pos]
        self.pos += 1
        return s
