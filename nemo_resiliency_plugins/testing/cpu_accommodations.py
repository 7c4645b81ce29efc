"""The reference workload's CPU accommodations: each lets Megatron Bridge's or NVRx's real code run on a host
without CUDA, for the duration of one call only, and does nothing where CUDA is available.

Why each exists is written beside it. None of them is part of the plugins: they make the proofs possible on CPU
machines (CI), and the GPU proof (``benchmarks/gpu/``) runs the same code without them. The list (each also marked
``# CPU accommodation:`` where it acts, most of them in this module):

    * ``maybe_setup_simulated_fault`` puts a one-element broadcast tensor on ``torch.cuda.current_device()``;
      on a host without CUDA that call is redirected to the CPU for the duration of the call only.
    * NVRx straggler detection (see ``../shared/research/ft-cpu.md`` section 6): NVRx's CUPTI extension cannot
      load here (it needs a newer libstdc++ and a GPU), so while the manager initialises, NVRx's
      ``CuptiManager`` is replaced by ``CpuKernelClock``, which reports the CPU time of the step's compute
      part (forward, loss, backward and the injected delay; not the gradient all-reduce, as NVRx leaves NCCL
      kernels out) as one "kernel". NVRx's report code and Megatron Bridge's thresholds then apply to it
      unchanged. ``torch.cuda.synchronize`` (NVRx's report), ``torch.cuda.current_device`` (NVRx's interval
      tracker, Megatron Bridge's stop flag broadcast) are redirected to the CPU during those calls only.
    * Re-run state machine: Megatron Core's ``RerunStateMachine`` saves and restores the CUDA RNG state and
      all-reduces its flags in CUDA tensors. During the train step ``torch.cuda.get_rng_state``/``set_rng_state``
      are no-ops (there is no CUDA RNG) and ``current_device`` answers "cpu", and the machine's ``_reduce_any`` is
      replaced on the instance by the same all-reduce on CPU tensors (gloo).
    * In-process restart (see ``../shared/research/ft-cpu.md`` section 5): (a) NVRx's ``Wrapper`` adds NVML
      GPU/NVLink/NIC health checks when ``LOCAL_RANK`` is set, which fail on a host without NVML at the first
      restart; ``LOCAL_RANK`` is hidden while Megatron Bridge constructs the wrapper, and only then. (b) NVRx's
      ``AbortTorchDistributed`` aborts only NCCL backends and gloo has no working abort, so a rank blocked in a
      gloo collective is released only by the process-group timeout: inside the wrapper the gloo group uses
      ``NRP_IPR_PG_TIMEOUT`` seconds (default 10) instead of ``dist.distributed_timeout_minutes`` (which on GPUs
      is the NCCL watchdog the plugin sets above ``hard_timeout``).
    * Test accommodation: :func:`reference_config_buildable` builds ``env_vars`` through :func:`no_env_vars`
      so that a fresh process deserializing the tree (NeMo-Run's fdl_runner) imports this module, and with
      it :mod:`~nemo_resiliency_plugins.testing.te_compat`, before any Megatron Bridge class.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

__all__ = [
    "CpuKernelClock",
    "cpu_kernel",
    "cuda_calls_on_cpu",
    "cupti_stand_in",
    "inprocess_wrapper_construction_on_cpu",
    "reduce_any_on_cpu",
    "simulated_fault_device_on_cpu",
]


@contextlib.contextmanager
def simulated_fault_device_on_cpu():
    # CPU accommodation: megatron.bridge.training.fault_tolerance.maybe_setup_simulated_fault creates its
    # one-element rank broadcast tensor on torch.cuda.current_device(), which raises on a host without
    # CUDA. With the gloo backend that tensor belongs on the CPU, so for the duration of that one call only
    # current_device() answers "cpu"; everything else in the function (rank choice, broadcast, fault thread)
    # is Megatron Bridge's own code.
    if torch.cuda.is_available():
        yield
        return
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


@contextlib.contextmanager
def cuda_calls_on_cpu():
    # CPU accommodation (straggler detection and re-run state machine; see the module docstring): NVRx's
    # Detector.generate_report calls torch.cuda.synchronize(), its ReportIntervalTracker and Megatron Bridge's
    # stop-flag broadcast put one-element tensors on torch.cuda.current_device(), and Megatron Core's
    # RerunStateMachine saves/restores torch.cuda's RNG state and names the device in its messages. There is no
    # CUDA here and the process group is gloo: for the duration of those calls only, current_device() answers
    # "cpu", synchronize() has nothing to wait for, and the CUDA RNG state is empty. Nothing is patched on a
    # host with CUDA.
    if torch.cuda.is_available():
        yield
        return
    names = ("current_device", "synchronize", "get_rng_state", "set_rng_state")
    saved = {name: getattr(torch.cuda, name) for name in names}
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    torch.cuda.synchronize = lambda *a, **k: None  # type: ignore[assignment]
    torch.cuda.get_rng_state = lambda *a, **k: torch.empty(0, dtype=torch.uint8)  # type: ignore[assignment]
    torch.cuda.set_rng_state = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.cuda, name, fn)


def reduce_any_on_cpu(value):
    # CPU accommodation: Megatron Core's RerunStateMachine._reduce_any, with the flag tensor on the CPU (gloo)
    # instead of device='cuda'. Same semantics: True on every rank if any rank has True.
    if isinstance(value, list):
        flags = torch.tensor(value, dtype=torch.int32)
        dist.all_reduce(flags)
        return tuple(x > 0 for x in flags.tolist())
    flag = torch.tensor([value], dtype=torch.int32)
    dist.all_reduce(flag)
    return flag.item() > 0


@dataclasses.dataclass(frozen=True)
class _KernelStats:
    """The fields NVRx reads from its CUPTI extension's per-kernel statistics."""

    min: float
    max: float
    median: float
    avg: float
    stddev: float
    num_calls: int


class CpuKernelClock:
    """CPU accommodation: a stand-in for NVRx's ``CuptiManager`` (same methods), used only without CUDA.

    CUPTI records the duration of every CUDA kernel launched while profiling is on (inside the train step that
    Megatron Bridge's manager wraps). Here the step's compute part is timed instead, by :func:`cpu_kernel`,
    and reported as one kernel named ``cpu_compute``; the gradient all-reduce is left out, as NVRx leaves out
    NCCL kernels (a fast rank waiting for a slow one in a collective is not slow itself). NVRx's
    ``ReportGenerator`` turns these statistics into the GPU relative/individual scores exactly as it does
    CUPTI's, and Megatron Bridge compares them with its thresholds.
    """

    active: CpuKernelClock | None = None

    def __init__(self, bufferSize=1_000_000, numBuffers=8, statsMaxLenPerKernel=4096):  # noqa: N803 (NVRx's names)
        self.max_len = statsMaxLenPerKernel
        self.started_cnt = 0
        self.is_initialized = False
        self.times: dict[str, list[float]] = {}
        CpuKernelClock.active = self

    def initialize(self):
        self.is_initialized = True

    def shutdown(self):
        self.is_initialized = False
        self.started_cnt = 0
        if CpuKernelClock.active is self:
            CpuKernelClock.active = None

    def start_profiling(self):
        self.started_cnt += 1

    def stop_profiling(self):
        if self.started_cnt == 0:
            raise RuntimeError("No active profiling run.")
        self.started_cnt -= 1

    def record(self, name: str, elapsed_ms: float) -> None:
        if self.started_cnt > 0:
            times = self.times.setdefault(name, [])
            times.append(elapsed_ms)
            del times[: -self.max_len]

    def get_results(self):
        results = {}
        for name, times in self.times.items():
            t = torch.tensor(times, dtype=torch.float64)
            results[name] = _KernelStats(
                min=t.min().item(),
                max=t.max().item(),
                median=t.median().item(),
                avg=t.mean().item(),
                stddev=t.std().item() if len(times) > 1 else float("nan"),
                num_calls=len(times),
            )
        return results

    def reset_results(self):
        self.times = {}


@contextlib.contextmanager
def cpu_kernel(name: str = "cpu_compute"):
    """Times the compute part of a step for :class:`CpuKernelClock` (a no-op when it is not in use)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        clock = CpuKernelClock.active
        if clock is not None:
            clock.record(name, (time.perf_counter() - start) * 1e3)


@contextlib.contextmanager
def cupti_stand_in():
    # CPU accommodation: NVRx's Detector.initialize() builds a CuptiManager, whose extension module cannot load
    # on this host (it needs GLIBCXX_3.4.32) and has no GPU to profile anyway; for the duration of that call it
    # builds a CpuKernelClock instead. Nothing is replaced on a host with CUDA.
    if torch.cuda.is_available():
        yield
        return
    from megatron.bridge.training import nvrx_straggler as mb_nvrx_straggler

    module = sys.modules[mb_nvrx_straggler.straggler.Detector.__module__]
    original = module.CuptiManager
    module.CuptiManager = CpuKernelClock
    try:
        yield
    finally:
        module.CuptiManager = original


@contextlib.contextmanager
def inprocess_wrapper_construction_on_cpu():
    """While Megatron Bridge builds its in-process wrapper on a host without CUDA (construction only)."""
    if torch.cuda.is_available():
        yield
        return
    import nvidia_resiliency_ext.inprocess as inprocess

    # CPU accommodation: NVRx's inprocess.Wrapper appends NVML-based GPU/NVLink/NIC health checks whenever
    # LOCAL_RANK is set; without NVML they raise NVMLError_LibraryNotFound at the first restart and the job
    # dies (ft-cpu.md section 5). LOCAL_RANK is hidden while the wrapper is constructed, and only then.
    # Megatron Bridge's own health check (CudaHealthCheck, which checks nothing without CUDA, and FaultCounter)
    # is kept.
    saved = os.environ.pop("LOCAL_RANK", None)
    _CpuThreadedFinalize = _cpu_threaded_finalize_class()
    # CPU accommodation: NVRx 0.7's ThreadedFinalize raises "CUDA is not available" before running its
    # function (it binds the finalize thread to the rank's GPU). Megatron Bridge builds its finalize steps
    # (destroy_global_state + GlobalState.reset_for_restart, torch.cuda.empty_cache) from
    # inprocess.finalize.ThreadedFinalize, so during construction that name is _CpuThreadedFinalize: the same
    # functions, in a thread, with the same timeout, minus the GPU binding.
    original_finalize = inprocess.finalize.ThreadedFinalize
    inprocess.finalize.ThreadedFinalize = _CpuThreadedFinalize
    try:
        yield
    finally:
        inprocess.finalize.ThreadedFinalize = original_finalize
        if saved is not None:
            os.environ["LOCAL_RANK"] = saved


def _cpu_threaded_finalize_class():
    import nvidia_resiliency_ext.inprocess as inprocess

    class CpuThreadedFinalize(inprocess.finalize.ThreadedFinalize):
        """NVRx's ThreadedFinalize without the CUDA device binding (see inprocess_wrapper_construction_on_cpu)."""

        def __call__(self, state):
            thread = threading.Thread(
                target=self.fn,
                args=self.args,
                kwargs=self.kwargs,
                name=f"CpuThreadedFinalize-{state.rank}",
                daemon=True,
            )
            thread.start()
            thread.join(self.timeout.total_seconds())
            if thread.is_alive():
                raise inprocess.exception.TimeoutError
            return state

    return CpuThreadedFinalize
