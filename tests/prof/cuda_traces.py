"""Chrome traces in the shape ``torch.profiler`` writes on a CUDA machine, for the GPU-only rows.

No GPU is here, and no small public trace of these cases was found to keep, so the traces are
built from the format that ``profile.export_chrome_trace()`` writes with the CPU and CUDA
activities (Kineto's ``ChromeTraceLogger``): complete events (``"ph": "X"``) with ``ts``/``dur``
in microseconds; categories ``user_annotation`` (``ProfilerStep#N``, the DataLoader's and the
optimizer's ``record_function`` ranges), ``cpu_op`` (``aten::`` operators), ``cuda_runtime``
(``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaStreamSynchronize``), ``kernel``,
``gpu_memcpy`` (named ``Memcpy HtoD (Pageable -> Device)``, ``Memcpy DtoH (Device -> Pageable)``)
and ``gpu_memset``; ``args`` with ``External id``, ``correlation``, ``device`` and ``stream``; the
``ac2g`` flow events (``"ph": "s"``/``"f"``) that link a launch to its kernel. Each builder plays
one cause for a few steps with fixed, stated durations, so the expected rows are known.
"""

from __future__ import annotations

CPU_PID, CPU_TID, GPU_PID, STREAM = 4242, 4242, 0, 7


class TraceBuilder:
    """Append events of one process on one CPU thread and one CUDA stream."""

    def __init__(self):
        self.events = [
            {"name": "process_name", "ph": "M", "pid": CPU_PID, "args": {"name": "python"}},
            {"name": "process_name", "ph": "M", "pid": GPU_PID, "args": {"name": "GPU 0"}},
        ]
        self.corr = 1000

    def cpu(self, name, ts, dur, cat="cpu_op"):
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": CPU_PID,
                "tid": CPU_TID,
                "ts": ts,
                "dur": dur,
                "args": {"External id": self.corr},
            }
        )

    def launch(
        self, op, ts, kernel_start, kernel_dur, name="void gemm_kernel<float>()", cat="kernel"
    ):
        """An operator of 10 us whose ``cudaLaunchKernel`` starts a kernel at ``kernel_start``."""
        self.corr += 1
        self.cpu(op, ts, 10)
        runtime = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": runtime,
                "pid": CPU_PID,
                "tid": CPU_TID,
                "ts": ts + 2,
                "dur": 6,
                "args": {"correlation": self.corr, "cbid": 211},
            }
        )
        self.device(name, kernel_start, kernel_dur, cat)
        self.events.append(
            {
                "ph": "s",
                "id": self.corr,
                "pid": CPU_PID,
                "tid": CPU_TID,
                "ts": ts + 2,
                "cat": "ac2g",
                "name": "ac2g",
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": self.corr,
                "pid": GPU_PID,
                "tid": STREAM,
                "ts": kernel_start,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def device(self, name, ts, dur, cat="kernel"):
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": GPU_PID,
                "tid": STREAM,
                "ts": ts,
                "dur": dur,
                "args": {"device": 0, "stream": STREAM, "correlation": self.corr},
            }
        )

    def step(self, n, ts, dur):
        self.cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def trace(self):
        return {"schemaVersion": 1, "traceEvents": self.events, "displayTimeUnit": "ms"}


def sync_stall_trace(steps=4):
    """Each 1500 us step: 10 kernels of 100 us, then ``loss.item()`` waits for them.

    The wait is a ``cudaStreamSynchronize``; then 480 us of Python (logging) while the GPU idles.
    """
    b = TraceBuilder()
    for s in range(steps):
        t0 = 1_000_000 + s * 1500
        b.step(s, t0, 1500)
        for i in range(10):
            b.launch("aten::addmm", t0 + 10 * i, t0 + 5 + 100 * i, 100)
        b.cpu("aten::item", t0 + 100, 912)
        b.cpu("aten::_local_scalar_dense", t0 + 101, 910)
        b.launch(
            "aten::copy_", t0 + 102, t0 + 1005, 2, "Memcpy DtoH (Device -> Pageable)", "gpu_memcpy"
        )
        b.cpu("cudaStreamSynchronize", t0 + 112, 896, cat="cuda_runtime")
    return b.trace()


def launch_bound_trace(steps=3):
    """Each 4000 us step: 200 tiny operators of 20 us, each launching a 3 us kernel."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = 2_000_000 + s * 4000
        b.step(s, t0, 4000)
        for i in range(200):
            b.launch("aten::add", t0 + 20 * i, t0 + 20 * i + 12, 3, "elementwise_kernel")
    return b.trace()


def copy_trace(pinned=False, steps=3):
    """Each 3000 us step: a 2000 us host-to-device copy of the batch, then 900 us of kernels."""
    b = TraceBuilder()
    kind = "Pinned" if pinned else "Pageable"
    for s in range(steps):
        t0 = 3_000_000 + s * 3000
        b.step(s, t0, 3000)
        b.cpu("aten::to", t0, 2010)
        b.cpu("aten::_to_copy", t0 + 1, 2008)
        b.launch(
            "aten::copy_", t0 + 2, t0 + 5, 2000, f"Memcpy HtoD ({kind} -> Device)", "gpu_memcpy"
        )
        for i in range(3):
            b.launch("aten::mm", t0 + 2020 + 10 * i, t0 + 2030 + 300 * i, 300)
    return b.trace()


def data_wait_trace(steps=3, on_gpu=False):
    """Each 5000 us step: 3500 us in the DataLoader's ``__next__``, then 1400 us of kernels.

    The batch is then copied to the GPU (a pinned 8 us memcpy), unless ``on_gpu``: a Dataset
    that returns CUDA tensors, whose ``__getitem__`` launches a kernel inside ``__next__``.
    """
    b = TraceBuilder()
    for s in range(steps):
        t0 = 4_000_000 + s * 5000
        b.step(s, t0, 5000)
        b.cpu(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t0,
            3500,
            "user_annotation",
        )
        if on_gpu:
            b.launch("aten::index", t0 + 100, t0 + 110, 4, "index_elementwise_kernel")
        else:
            b.launch(
                "aten::copy_",
                t0 + 3500,
                t0 + 3502,
                8,
                "Memcpy HtoD (Pinned -> Device)",
                "gpu_memcpy",
            )
        for i in range(7):
            b.launch("aten::mm", t0 + 3510 + 10 * i, t0 + 3520 + 200 * i, 200)
    return b.trace()


def healthy_trace(steps=3):
    """Each 2000 us step: 4 kernels of 480 us back to back: the GPU computes 96 % of the time."""
    b = TraceBuilder()
    for s in range(steps):
        t0 = 5_000_000 + s * 2000
        b.step(s, t0, 2000)
        for i in range(4):
            b.launch("aten::mm", t0 + 10 * i, t0 + 40 + 480 * i, 480)
    return b.trace()
