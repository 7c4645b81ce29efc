#!/usr/bin/env python
"""Recovery benchmarks: what each resiliency mechanism costs and saves, side by side in one invocation.

Run from the repository root (one command; 30 jobs + host-side figures; how long it takes and why:
``benchmarks/README.md``)::

    .venv/bin/python benchmarks/recovery.py            # 3 repetitions of every case
    .venv/bin/python benchmarks/recovery.py --smoke    # 1 repetition, shorter steps (CI: tests/smoke)

Options: ``--repeat N`` (runs per case), ``--import-repeat N`` (fresh interpreters per import measurement),
``--out DIR`` (default ``benchmarks/results``), ``--keep`` (keep the jobs' logs and checkpoints), ``--job-timeout S``
(default 300; a job still running then is ended and reported as TIMEOUT).

Every case runs the reference workload (``nemo_resiliency_plugins.testing.workload``: 2 CPU ranks, torch +
gloo, Megatron Bridge's config parser and fault-tolerance hooks; 20 steps, a checkpoint every 5, the fault on
rank 1 at step 13 so every recovery resumes from step 10) through NeMo-Run's real ``Experiment`` +
``LocalExecutor``. The variants of a case alternate inside each repetition, so a change of machine load hits
both. Cases:

1. fault-free: plain ``torchrun`` (no plugin) vs ``ft_launcher`` via ``FaultTolerancePlugin()`` (defaults):
   wall time, and the time per step: rank 0's median iteration without a checkpoint, FT hooks included, as
   the workload times it (``STEP_TIMES``), which leaves out process start-up (dominated by importing Megatron
   Bridge in each rank); also steps 5 -> 20 by the checkpoint files' modification times;
2. rank 1 killed (SIGKILL) at step 13: ``torchrun --max-restarts 3`` vs the plugin -> time lost = wall -
   median fault-free wall of the same launcher. NeMo-Run's ``run.Torchrun`` has no restart field (its
   ``max_retries`` is the scheduler's); torchrun reads ``--max-restarts`` from ``PET_MAX_RESTARTS``, which the
   benchmark puts in the executor's environment (the launcher's config dump in the log shows it arrive).
   torchrun's restarted ranks need the workload's per-attempt store prefix (pytorch/pytorch#167288: without
   it a restart failed in gloo set-up in 2 of 3 runs);
3. rank 1 hung in step 13: detection latency as NVRx reports it ("Section 'step' has been open for X
   seconds") with explicit section timeouts, and with the timeouts Megatron Bridge computed on a fault-free
   run (``ft_state.json``, copied from case 1) loaded on the second run; Megatron Bridge's default timeouts
   are reported from their values, not waited for;
2r. the same kill with in-process restart and a warm reserve (``InProcessRestartPlugin(active_world_size=2)`` on 3
   ranks, torchrun, each rank under the plugin's rank keeper): the reserve takes rank 1's place in the same job.
   Time lost = launcher wall - median fault-free launcher wall of the same 3-rank set-up (run in the kill case),
   side by side with torchrun's and ft_launcher's restart; and how it splits (NVRx's log lines and the workload's);
4. an exception raised on rank 1 at step 13: ``ft_launcher`` restart vs in-process restart
   (``InProcessRestartPlugin`` + ``FaultTolerancePlugin``), when ``nemo_resiliency_plugins.inprocess_restart``
   exists and its run recovers in-process; otherwise the row says why it was not measured;
5. ``import nemo_resiliency_plugins`` on top of ``import nemo_run`` (fresh interpreters), and
   ``Experiment.add`` of 100 ``run.Script`` tasks with and without ``FaultTolerancePlugin``.

Output: a markdown table (printed, and written to ``<out>/recovery-<UTC date>[-smoke].md`` with the machine
description and load) and one PNG timeline per fault case (``...-kill.png``, ``-hang.png``, ``-raise.png``:
fault, detection, restart, resume, first checkpoint after recovery, finish). Event times come from the
launchers' own timestamped log lines, the fault marker the workload writes, the checkpoint files'
modification times, and, for worker lines without a timestamp (``RESUMED``), the time the line reached the
job log (polled every 0.1 s). Needs matplotlib for the PNGs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STEPS = 20  # the reference config's train.train_iters
SAVE_INTERVAL = 5  # the reference config's checkpoint.save_interval
FAULT_STEP = 13  # every recovery resumes from the step-10 checkpoint
FAULT_RANK = 1
RESTARTS = 3
MB_DEFAULT_STEP_TIMEOUT_S = 180.0  # Megatron Bridge's FaultTolerancePlugin / documented section timeouts
MB_DEFAULT_CHECK_INTERVAL_S = 5.0
MB_DEFAULT_PG_TIMEOUT_S = 600.0  # Megatron Bridge's dist.distributed_timeout_minutes = 10
HANG_SECTION_TIMEOUTS = {"setup": 120.0, "step": 5.0, "checkpointing": 60.0}
HANG_CHECK_INTERVAL_S = 1.0
TARGETS = {
    "ft_step_overhead": 1.02,
    "kill_time_lost": 1.2,
    "reserve_time_lost": 0.3,
    "hang_computed_s": 10.0,
    "import": 1.10,
}

ROWS = tuple("1a 1b 1c 1f 1d 1e 2a 2b 2c 2d 2e 2f 2g 2h 3a 3b 3c 3d 4a 4b 5a 5b 5c".split())  # every row of the table


# ------------------------------------------------------------------------------------------------ statistics
def _clean(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def median(values: Sequence[float | None]) -> float | None:
    vals = _clean(values)
    return statistics.median(vals) if vals else None


def triple(values: Sequence[float | None], fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """'min / median / max' (one value as is; none as n/a)."""
    vals = _clean(values)
    if not vals:
        return "n/a"
    if len(vals) == 1:
        return fmt.format(vals[0] * scale)
    return " / ".join(fmt.format(v * scale) for v in (min(vals), statistics.median(vals), max(vals)))


def ratio(ours: float | None, base: float | None) -> float | None:
    if ours is None or base is None or base == 0:
        return None
    return ours / base


def fmt_ratio(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.3f}"


# ------------------------------------------------------------------------------------------------ log capture
_GLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2}\.\d+) ")
_NVRX = re.compile(r"^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2}),(\d{3}) \[")
_WORKER_PREFIX = re.compile(r"^\[default\d+\]:")


def line_time(line: str, arrival: float) -> tuple[float, bool]:
    """(time, own): the launcher line's own timestamp (local time) when it has one, else its arrival time."""
    if _WORKER_PREFIX.match(line):
        return arrival, False
    m = _NVRX.match(line)
    if m:
        y, mo, d, h, mi, s, ms = (int(g) for g in m.groups())
        return time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + ms / 1000, True
    m = _GLOG.match(line)
    if m:
        mo, d, h, mi = (int(g) for g in m.groups()[:4])
        sec = float(m.group(5))
        year = time.localtime(arrival).tm_year
        return time.mktime((year, mo, d, h, mi, int(sec), 0, 0, -1)) + (sec - int(sec)), True
    return arrival, False


class LogTail(threading.Thread):
    """Follows a run's logs while it runs, stamping each line with the time it was read.

    Launcher lines come from torchx's ``combined.log`` (they carry their own timestamps). Worker lines are read
    from the per-attempt, per-rank ``attempt_<n>/<rank>/stdout.log`` files that torchrun and ft_launcher make
    the ranks write directly (the ranks run ``python -u``): the copies that reach ``combined.log`` pass through
    the launcher's buffered stdout and can arrive many seconds late. They are prefixed ``[default<rank>]:``
    like the copies in ``combined.log``, which are dropped.
    """

    def __init__(self, root: Path, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval = interval
        self.lines: list[tuple[float, str]] = []
        self._halt = threading.Event()
        self._files: dict[Path, list[Any]] = {}  # path -> [offset, pending bytes, prefix or None (combined)]
        self._last_scan = 0.0

    def run(self) -> None:
        while not self._halt.is_set():
            self._poll()
            self._halt.wait(self.interval)
        self._poll(scan=True)
        for state in self._files.values():
            if state[1]:
                self._add(time.time(), state[1], state[2])

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def _scan(self) -> None:
        for path in self.root.rglob("*.log"):
            if path in self._files:
                continue
            if path.name == "combined.log":
                self._files[path] = [0, b"", None]
            elif path.name == "stdout.log" and path.parent.parent.name.startswith("attempt_"):
                self._files[path] = [0, b"", f"[default{path.parent.name}]:"]

    def _add(self, now: float, raw: bytes, prefix: str | None) -> None:
        text = raw.decode(errors="replace")
        if prefix is None:
            if not _WORKER_PREFIX.match(text):
                self.lines.append((now, text))
        else:
            self.lines.append((now, prefix + text))

    def _poll(self, scan: bool = False) -> None:
        now = time.time()
        if scan or now - self._last_scan > 0.5:
            self._last_scan = now
            self._scan()
        for path, state in self._files.items():
            try:
                with open(path, "rb") as f:
                    f.seek(state[0])
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            state[0] += len(data)
            *complete, state[1] = (state[1] + data).split(b"\n")
            for raw in complete:
                self._add(now, raw, state[2])


# ------------------------------------------------------------------------------------------------ one job
@dataclasses.dataclass
class Run:
    case: str
    variant: str
    rep: int
    state: str
    wall_s: float
    t0: float
    t_end: float
    save_dir: Path
    lines: list[tuple[float, str, bool]]  # (time, text, time is the line's own timestamp)
    load1: float
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.state == "SUCCEEDED"

    def grep(self, needle: str, after: float = 0.0, launcher_only: bool = False) -> list[tuple[float, str]]:
        return [
            (t, text)
            for t, text, own in self.lines
            if needle in text and t >= after and (own or not launcher_only or not _WORKER_PREFIX.match(text))
        ]

    def first(self, needles: Sequence[str], after: float = 0.0, launcher_only: bool = False) -> float | None:
        times = [hits[0][0] for n in needles if (hits := self.grep(n, after, launcher_only))]
        return min(times) if times else None

    def mtime(self, name: str) -> float | None:
        path = self.save_dir / name
        return path.stat().st_mtime if path.exists() else None

    def fault_time(self) -> float | None:
        path = self.save_dir / "nrp_fault_injected"
        if not path.exists():
            return None
        m = re.search(r"time=([0-9.]+)", path.read_text())
        return float(m.group(1)) if m else None

    def events(self) -> dict[str, float | None]:
        """Timeline of the run, in seconds since launch."""
        fault = self.fault_time()
        ev: dict[str, float | None] = {
            "launch": self.t0,
            "ranks up": max((t for t, text in self.grep("] START rank=") if "restart=0" in text), default=None),
            "fault": fault,
            "detected": None,
            "restarted": None,
            "resumed": None,
            "checkpoint after recovery": None,
            "finished": self.mtime("final_params.pt"),
            "job end": self.t_end,
        }
        if fault is not None:
            ev["detected"] = self.first(
                ["has been open for", "Worker group FAILED", "Worker group UNHEALTHY", "Event: failure_detected"],
                after=fault - 0.5,
                launcher_only=True,
            )
            inprocess = [t for t, text in self.inprocess_entries() if t >= fault]
            if inprocess:
                ev["restarted"] = max(inprocess)
            else:
                ev["restarted"] = self.first(["Starting worker group"], after=fault, launcher_only=True)
            resumed = self.grep("RESUMED from step", after=fault)
            ev["resumed"] = max(t for t, _ in resumed) if resumed else None
            after = sorted(p.stat().st_mtime for p in self.save_dir.glob("iter_*.pt") if p.stat().st_mtime > fault)
            ev["checkpoint after recovery"] = after[0] if after else None
        return {k: (None if v is None else v - self.t0) for k, v in ev.items()}

    def launcher_wall(self) -> float | None:
        """Seconds from the launcher's first to its last own-timestamped log line: the job itself, without
        NeMo-Run's packaging before it and its 2-second status polling after it."""
        stamped = [t for t, text, own in self.lines if own and not _WORKER_PREFIX.match(text)]
        return max(stamped) - min(stamped) if self.ok and len(stamped) > 1 else None

    def inprocess_entries(self) -> list[tuple[float, str]]:
        out = []
        for _, text, _ in self.lines:
            m = re.search(r"INPROCESS iteration=(\d+) pid=\d+ time=([0-9.]+)", text)
            if m and int(m.group(1)) >= 1:
                out.append((float(m.group(2)), text))
        return out

    def step_time(self) -> float | None:
        """Seconds per step between the step-5 and the last checkpoint (file modification times)."""
        first, last = self.mtime(f"iter_{SAVE_INTERVAL:07d}.pt"), self.mtime(f"iter_{STEPS:07d}.pt")
        if first is None or last is None or self.fault_time() is not None:
            return None
        return (last - first) / (STEPS - SAVE_INTERVAL)

    def iteration_time(self) -> float | None:
        """Rank 0's median iteration (no checkpoint in it, FT hooks included) from its ``STEP_TIMES`` line."""
        hits = self.grep("STEP_TIMES n=")
        if not hits or self.fault_time() is not None:
            return None
        m = re.search(r"median_ms=([0-9.]+)", hits[-1][1])
        return float(m.group(1)) / 1e3 if m else None

    def hang_open_s(self) -> float | None:
        hits = self.grep("Section 'step' has been open for")
        if not hits:
            return None
        m = re.search(r"has been open for ([0-9.]+) seconds", hits[0][1])
        return float(m.group(1)) if m else None

    def loaded_step_timeout(self) -> float | None:
        hits = self.grep("FT: loaded timeouts from")
        if not hits:
            return None
        m = re.search(r"step=([0-9.]+)", hits[0][1])
        return float(m.group(1)) if m else None


def job_processes(save: Path) -> tuple[list[int], list[int]]:
    """(launchers, the rest) of the job writing to ``save``: every process whose command line runs the
    workload with that checkpoint directory (the launcher's names it too); launchers are those whose parent's
    does not. Nothing else (the benchmark itself, other jobs) is ever in either list."""
    needle = f"checkpoint.save={save}"
    found: dict[int, int] = {}  # pid -> parent pid
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmd or "testing.workload" not in cmd:
                continue
            found[int(pid_dir.name)] = int((pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    launchers = sorted(pid for pid, parent in found.items() if parent not in found)
    return launchers, sorted(set(found) - set(launchers))


def _stop_job(save: Path, flag: threading.Event) -> None:
    """Watchdog: a job past its time limit (e.g. a restarted group stuck in process-group set-up) is ended, so
    that one stuck run cannot eat the benchmark's budget: its launcher gets SIGTERM, then what is left SIGKILL.
    """
    import signal

    flag.set()
    launchers, rest = job_processes(save)
    for sig, pids in ((signal.SIGTERM, launchers), (signal.SIGKILL, rest + launchers)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        time.sleep(3)


class Bench:
    def __init__(self, work: Path, step_time: str, console: Callable[[str], None]) -> None:
        self.work = work
        self.step_time = step_time
        self.say = console
        self.runs: list[Run] = []
        self.counter = 0
        self.total = 0
        self.after_job: Callable[[], Any] | None = None
        self.job_timeout = 600.0

    def job(
        self,
        case: str,
        variant: str,
        rep: int,
        plugins: Callable[[], list[Any]],
        *,
        fault: str | None = None,
        launcher: Any = None,
        executor_env: dict[str, str] | None = None,
        prepare: Callable[[Path], None] | None = None,
        ntasks: int = 2,
        overrides: Sequence[str] = (),
    ) -> Run:
        from nemo_resiliency_plugins.testing.local_run import run_local, workload_task

        self.counter += 1
        slug = f"{case}-{variant}-{rep}".replace(" ", "_").replace("+", "_")
        root = self.work / slug
        save = root / "ckpt"
        save.mkdir(parents=True)
        if prepare:
            prepare(save)
        env = {"NRP_STEP_TIME": self.step_time}
        if fault:
            env |= {"NRP_FAULT": fault, "NRP_FAULT_STEP": str(FAULT_STEP), "NRP_FAULT_RANK": str(FAULT_RANK)}
        # checkpoint.load too: Megatron Bridge (and the workload) resume only from it. The plugins would wire it;
        # the plain torchrun baseline has no plugin, and a user running it names both, as Megatron Bridge's recipes do.
        task = workload_task([f"checkpoint.save={save}", f"checkpoint.load={save}", *overrides], env=env)
        load1 = os.getloadavg()[0]
        tail = LogTail(root)
        console_log = root / "nemo_run_console.txt"
        tail.start()
        t0 = time.time()
        state = "ERROR"
        timed_out = threading.Event()
        watchdog = threading.Timer(self.job_timeout, _stop_job, args=(save, timed_out))
        watchdog.daemon = True
        watchdog.start()
        try:
            with open(console_log, "w") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                result = run_local(
                    task,
                    plugins(),
                    name=f"bench-{slug}"[:60],
                    ntasks=ntasks,
                    env=executor_env,
                    base_dir=str(root),
                    launcher=launcher,
                )
            state = result.state
        except Exception as e:  # a broken case is reported in its row, the others still run
            with open(console_log, "a") as out:
                out.write(f"\nbenchmark: {type(e).__name__}: {e}\n")
        t_end = time.time()
        watchdog.cancel()
        if timed_out.is_set():
            state = f"TIMEOUT>{self.job_timeout:.0f}s"
        tail.stop()
        lines = []
        for arrival, text in tail.lines:
            t, own = line_time(text, arrival)
            lines.append((t, text, own))
        run = Run(case, variant, rep, state, t_end - t0, t0, t_end, save, lines, load1, console_log)
        self.runs.append(run)
        self.say(
            f"[{self.counter:2d}/{self.total}] {case:<10} {variant:<26} rep {rep + 1}: {state:<9} "
            f"wall {run.wall_s:6.1f} s   load(1 min) {load1:.2f}"
        )
        if self.after_job:
            self.after_job()
        return run

    def of(self, case: str, variant: str) -> list[Run]:
        return [r for r in self.runs if r.case == case and r.variant == variant]


# ------------------------------------------------------------------------------------------------ plugins
def ft_default() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    return [FaultTolerancePlugin(num_in_job_restarts=RESTARTS)]


def ft_hang() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    return [
        FaultTolerancePlugin(
            num_in_job_restarts=RESTARTS,
            section_timeouts=dict(HANG_SECTION_TIMEOUTS),
            workload_check_interval=HANG_CHECK_INTERVAL_S,
        )
    ]


def ft_raise() -> list[Any]:
    from nemo_resiliency_plugins import FaultTolerancePlugin

    # A step timeout well above the in-process restart's timeouts: the rank monitor must not act first.
    return [
        FaultTolerancePlugin(
            num_in_job_restarts=RESTARTS,
            section_timeouts={"setup": 120.0, "step": 30.0, "checkpointing": 60.0},
            out_of_section_timeout=60.0,
            workload_check_interval=1.0,
        )
    ]


def ipr_settings() -> dict[str, Any]:
    # "rank" granularity: "node" sizes the layout by torch.cuda.device_count(), 0 on this host.
    return dict(
        granularity="rank",
        heartbeat_interval=2.0,
        heartbeat_timeout=20.0,
        soft_timeout=20.0,
        hard_timeout=30.0,
        barrier_timeout=60.0,
        completion_timeout=60.0,
    )


def ipr_reserve() -> list[Any]:
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

    return [InProcessRestartPlugin(**ipr_settings(), active_world_size=2)]


# 3 ranks = 2 active + 1 reserve; Megatron Bridge derives data_parallel_size from WORLD_SIZE=3 before NVRx assigns
# ranks, so the global batch must divide by 3 and 2 (the toy model's data does not depend on it).
RESERVE_RUN = {"ntasks": 3, "overrides": ("train.global_batch_size=12",)}


def ft_and_ipr() -> list[Any]:
    from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

    return ft_raise() + [InProcessRestartPlugin(**ipr_settings())]


def inprocess_unavailable() -> str | None:
    if not (REPO / "nemo_resiliency_plugins" / "inprocess_restart.py").exists():
        return "nemo_resiliency_plugins/inprocess_restart.py does not exist"
    try:
        from nemo_resiliency_plugins.inprocess_restart import InProcessRestartPlugin

        InProcessRestartPlugin(**ipr_settings())
    except Exception as e:
        return f"InProcessRestartPlugin unusable: {type(e).__name__}: {e}"
    return None


# ------------------------------------------------------------------------------------------------ cases 1-4
TORCHRUN = "torchrun"
FT = "ft_launcher + plugin"
HANG_EXPLICIT = "explicit timeouts"
HANG_COMPUTED = "computed timeouts"
LAUNCHER_RESTART = "ft_launcher restart"
INPROCESS = "in-process restart"
RESERVE = "in-process + warm reserve"


CASES = ("fault-free", "kill", "hang", "raise")


def run_jobs(bench: Bench, repeat: int, notes: dict[str, Any], cases: Sequence[str] = CASES) -> None:
    """Every case once per repetition (so a cut-short run still has a figure in every row); the two variants
    of a case alternate their order from one repetition to the next. ``cases`` narrows the run (development:
    the rows of the cases left out say n/a)."""
    notes["ipr_reason"] = inprocess_unavailable()
    per_rep = 2 * len(cases) - (1 if "raise" in cases and notes["ipr_reason"] is not None else 0)
    per_rep += 2 if "kill" in cases and notes["ipr_reason"] is None else 0
    bench.total = per_rep * repeat
    torchrun_env = {"PET_MAX_RESTARTS": str(RESTARTS)}
    seed: list[Run] = []

    def copy_state(save: Path) -> None:
        # The "computed" hang runs load the timeouts a fault-free ft_launcher run saved (Megatron Bridge's
        # calc_ft_timeouts), as the next run of a job in the same checkpoint directory would.
        if not seed:
            found = [r for r in bench.of("fault-free", FT) if r.ok and (r.save_dir / "ft_state.json").exists()]
            if not found:
                return
            seed.append(found[0])
            notes["ft_state"] = json.loads((found[0].save_dir / "ft_state.json").read_text())
        shutil.copy(seed[0].save_dir / "ft_state.json", save / "ft_state.json")

    def alternate(pair: list, rep: int) -> list:
        return pair[::-1] if rep % 2 else pair

    for rep in range(repeat):
        for variant, launcher, env, plugins in alternate(
            [(TORCHRUN, "torchrun", torchrun_env, list), (FT, None, None, ft_default)], rep
        ):
            if "fault-free" in cases:
                bench.job("fault-free", variant, rep, plugins, launcher=launcher, executor_env=env)
        for variant, launcher, env, plugins in alternate(
            [(TORCHRUN, "torchrun", torchrun_env, list), (FT, None, None, ft_default)], rep
        ):
            if "kill" in cases:
                bench.job("kill", variant, rep, plugins, fault="kill", launcher=launcher, executor_env=env)
        for fault in alternate([None, "kill"], rep) if "kill" in cases and notes["ipr_reason"] is None else ():
            bench.job("kill" if fault else "fault-free", RESERVE, rep, ipr_reserve, fault=fault, **RESERVE_RUN)
        for variant, prepare in alternate([(HANG_EXPLICIT, None), (HANG_COMPUTED, copy_state)], rep):
            if "hang" in cases:
                bench.job("hang", variant, rep, ft_hang, fault="hang", prepare=prepare)
        for variant in alternate([LAUNCHER_RESTART, INPROCESS], rep) if "raise" in cases else ():
            if variant == LAUNCHER_RESTART:
                bench.job("raise", LAUNCHER_RESTART, rep, ft_raise, fault="raise")
            elif notes["ipr_reason"] is None:
                run = bench.job("raise", INPROCESS, rep, ft_and_ipr, fault="raise")
                if not run.ok:
                    notes["ipr_reason"] = f"the in-process run ended {run.state} (--keep keeps its log)"
                elif not run.inprocess_entries():
                    notes["ipr_reason"] = "the job recovered, but not in-process (no INPROCESS iteration=1 line)"
                if notes["ipr_reason"]:
                    bench.total -= repeat - rep - 1


# ------------------------------------------------------------------------------------------------ case 5
_IMPORT_CODE = """
import time
t0 = time.perf_counter()
import nemo_run
t1 = time.perf_counter()
from nemo_resiliency_plugins import *  # every plugin module (the package resolves its names lazily)
t2 = time.perf_counter()
print("IMPORT", t1 - t0, t2 - t1)
"""

_SETUP_CODE = """
import sys, time, tempfile
import nemo_run as run
from nemo_resiliency_plugins import FaultTolerancePlugin

n, reps, base = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def task():
    return run.Script(path="nemo_resiliency_plugins.testing.workload", m=True, entrypoint="python",
                      args=["checkpoint.save=/tmp/nrp-bench-ckpt"])

def add_all(with_plugin):
    with run.Experiment("setup-bench", base_dir=base, log_level="ERROR") as exp:
        t = time.perf_counter()
        for i in range(n):
            plugins = [FaultTolerancePlugin()] if with_plugin else None
            exp.add(task(), executor=run.LocalExecutor(ntasks_per_node=2), name=f"t{i}", plugins=plugins)
        return time.perf_counter() - t

def setup_only():
    pairs = [(task(), run.LocalExecutor(ntasks_per_node=2)) for _ in range(n)]
    plugin = FaultTolerancePlugin()
    t = time.perf_counter()
    for tk, ex in pairs:
        plugin.setup(tk, ex)
    return time.perf_counter() - t

add_all(True)  # warm-up: first-use imports and caches
for _ in range(reps):
    print("SETUP", add_all(False), add_all(True), setup_only(), flush=True)
"""


def child_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NEMORUN_HOME"] = str(home)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def measure_imports(work: Path, reps: int) -> dict[str, list[float]]:
    env = child_env(work / "import-home")
    base, extra = [], []
    for _ in range(reps):
        out = subprocess.run(
            [sys.executable, "-c", _IMPORT_CODE], env=env, capture_output=True, text=True, cwd=work, check=True
        ).stdout
        m = re.search(r"IMPORT ([0-9.e-]+) ([0-9.e-]+)", out)
        base.append(float(m.group(1)))
        extra.append(float(m.group(2)))
    return {"nemo_run": base, "plugins": extra}


def measure_setup(work: Path, n: int, reps: int) -> dict[str, list[float]]:
    home = work / "setup-home"
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-c", _SETUP_CODE, str(n), str(reps), str(home)],
        env=child_env(home),
        capture_output=True,
        text=True,
        cwd=work,
    )
    rows = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("SETUP ")]
    if proc.returncode != 0 or not rows:
        raise RuntimeError(f"setup benchmark failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {
        "without": [float(r[0]) for r in rows],
        "with": [float(r[1]) for r in rows],
        "setup_only": [float(r[2]) for r in rows],
    }


# ------------------------------------------------------------------------------------------------ report
def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError as e:
        return f"({e})"


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def foreign_jobs() -> int:
    """Training processes on the machine that this benchmark did not start (ft_launcher/torchrun/workload)."""
    mine = {os.getpid()}
    count = 0
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) in mine:
            continue
        try:
            cmd = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ft_launcher" in cmd or "torchrun" in cmd or "testing.workload" in cmd:
            count += 1
    return count


def machine_description(load: dict[str, Any]) -> list[str]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line), platform.processor())
    lines = [
        "## Machine",
        "",
        f"* `nproc`: {_sh(['nproc'])} ({cpu})",
        "* `free -g`:",
        "",
        "```",
        _sh(["free", "-g"]),
        "```",
        "",
        f"* OS: {platform.platform()}",
        f"* Python {platform.python_version()}, torch {_version('torch')}, NVRx (nvidia-resiliency-ext) "
        f"{_version('nvidia-resiliency-ext')}, nemo-run {_version('nemo-run')}, megatron-bridge "
        f"{_version('megatron-bridge')}, matplotlib {_version('matplotlib')}",
        f"* Load (1-minute load average): {load['start']:.2f} at start, {load['end']:.2f} at end; at the start of "
        f"each job min / median / max {load['jobs']}. Training processes of others running (ft_launcher, "
        f"torchrun, workload ranks): {load['foreign_start']} at start, {load['foreign_end']} at end.",
        "",
    ]
    return lines


def _wall(runs: list[Run]) -> list[float | None]:
    return [r.wall_s if r.ok else None for r in runs]


def _jwall(runs: list[Run]) -> list[float | None]:
    return [r.launcher_wall() for r in runs]


def _lost(runs: list[Run], fault_free: list[Run]) -> list[float | None]:
    """Launcher wall of each faulty run minus the median launcher wall of the fault-free runs."""
    base = median(_jwall(fault_free))
    return [None if w is None or base is None else w - base for w in _jwall(runs)]


def _ev(runs: list[Run], a: str, b: str) -> list[float | None]:
    out = []
    for r in runs:
        ev = r.events()
        out.append(ev[b] - ev[a] if r.ok and ev.get(a) is not None and ev.get(b) is not None else None)
    return out


# Lines the ranks write to stdout (the rank keeper's report, the workload's); NVRx's own go to stderr, unread here.
RESERVE_SPLIT = ("RANK_DIED", "INPROCESS iteration=1", "RESUMED", "checkpoint")


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _reserve_split(runs: list[Run], key: str) -> list[float | None]:
    """Seconds from the kill to the last line containing ``key`` (to the first checkpoint after it for
    "checkpoint"), per successful run."""
    out: list[float | None] = []
    for r in runs:
        fault = r.fault_time()
        if not r.ok or fault is None:
            out.append(None)
            continue
        if key == "checkpoint":
            after = [p.stat().st_mtime for p in r.save_dir.glob("iter_*.pt") if p.stat().st_mtime > fault]
            out.append(min(after) - fault if after else None)
            continue
        hits = [t for t, _ in r.grep(key, after=fault - 0.5)]
        out.append(max(hits) - fault if hits else None)
    return out


def _failed(runs: list[Run]) -> str:
    bad = [r for r in runs if not r.ok]
    return f" ({len(bad)}/{len(runs)} FAILED)" if bad else ""


def _met(value: float | None, limit: float) -> str:
    if value is None:
        return "n/a"
    return "**met**" if value <= limit else "**missed**"


def build_table(bench: Bench, notes: dict[str, Any], imports: dict | None, setup: dict | None) -> tuple[list, dict]:
    """Rows of the main table and a dict of headline figures."""
    rows: list[list[str]] = []
    head: dict[str, Any] = {}

    def row(rid, what, base, ours, r, target="", met=""):
        rows.append([rid, what, base, ours, fmt_ratio(r) if not isinstance(r, str) else r, target, met])

    ff_tr, ff_ft = bench.of("fault-free", TORCHRUN), bench.of("fault-free", FT)
    w_tr, w_ft = median(_wall(ff_tr)), median(_wall(ff_ft))
    row(
        "1a",
        "fault-free wall time, NeMo-Run launch -> job seen ended [s] (baseline torchrun, ours ft_launcher + plugin)",
        triple(_wall(ff_tr)) + _failed(ff_tr),
        triple(_wall(ff_ft)) + _failed(ff_ft),
        ratio(w_ft, w_tr),
    )
    row(
        "1b",
        "fault-free launcher wall: the launcher's first -> last log line [s]",
        triple(_jwall(ff_tr)),
        triple(_jwall(ff_ft)),
        ratio(median(_jwall(ff_ft)), median(_jwall(ff_tr))),
    )
    it_tr, it_ft = [r.iteration_time() for r in ff_tr], [r.iteration_time() for r in ff_ft]
    r_step = ratio(median(it_ft), median(it_tr))
    head["step_ratio"] = r_step
    row(
        "1c",
        "time per step: rank 0's median iteration without a checkpoint, FT step hooks included [ms]",
        triple(it_tr, "{:.2f}", 1e3),
        triple(it_ft, "{:.2f}", 1e3),
        r_step,
        f"<= {TARGETS['ft_step_overhead']:.2f}",
        _met(r_step, TARGETS["ft_step_overhead"]),
    )
    st_tr, st_ft = [r.step_time() for r in ff_tr], [r.step_time() for r in ff_ft]
    row(
        "1f",
        f"time per step incl. checkpoints: steps {SAVE_INTERVAL}->{STEPS} by checkpoint mtimes [ms]",
        triple(st_tr, "{:.1f}", 1e3),
        triple(st_ft, "{:.1f}", 1e3),
        ratio(median(st_ft), median(st_tr)),
    )
    row(
        "1d",
        "start-up: launch -> both ranks running (START line) [s]",
        triple(_ev(ff_tr, "launch", "ranks up")),
        triple(_ev(ff_ft, "launch", "ranks up")),
        ratio(median(_ev(ff_ft, "launch", "ranks up")), median(_ev(ff_tr, "launch", "ranks up"))),
    )
    row(
        "1e",
        "shut-down: final parameters written -> job end [s]",
        triple(_ev(ff_tr, "finished", "job end")),
        triple(_ev(ff_ft, "finished", "job end")),
        ratio(median(_ev(ff_ft, "finished", "job end")), median(_ev(ff_tr, "finished", "job end"))),
    )

    k_tr, k_ft = bench.of("kill", TORCHRUN), bench.of("kill", FT)
    row(
        "2a",
        "rank killed at step 13: wall time [s] (torchrun --max-restarts 3 vs ours)",
        triple(_wall(k_tr)) + _failed(k_tr),
        triple(_wall(k_ft)) + _failed(k_ft),
        ratio(median(_wall(k_ft)), median(_wall(k_tr))),
    )
    lost_tr, lost_ft = _lost(k_tr, ff_tr), _lost(k_ft, ff_ft)
    r_lost = ratio(median(lost_ft), median(lost_tr))
    head["lost_ratio"] = r_lost
    row(
        "2b",
        "time lost = launcher wall - median fault-free launcher wall, same launcher [s]",
        triple(lost_tr),
        triple(lost_ft),
        r_lost,
        f"<= {TARGETS['kill_time_lost']:.1f}",
        _met(r_lost, TARGETS["kill_time_lost"]),
    )
    row(
        "2c",
        "fault -> detected by the launcher [s]",
        triple(_ev(k_tr, "fault", "detected"), "{:.2f}"),
        triple(_ev(k_ft, "fault", "detected"), "{:.2f}"),
        ratio(median(_ev(k_ft, "fault", "detected")), median(_ev(k_tr, "fault", "detected"))),
    )
    rec_tr, rec_ft = _ev(k_tr, "fault", "checkpoint after recovery"), _ev(k_ft, "fault", "checkpoint after recovery")
    row(
        "2d",
        "fault -> first checkpoint after recovery (step 15) [s]",
        triple(rec_tr),
        triple(rec_ft),
        ratio(median(rec_ft), median(rec_tr)),
    )

    def restarts(runs: list[Run]) -> list[float | None]:
        return [float(len(r.grep("will restart worker group", launcher_only=True))) if r.ok else None for r in runs]

    row(
        "2e",
        "launcher restarts the job needed (1 = the fault's own; more = a restart that failed again)",
        triple(restarts(k_tr), "{:.0f}"),
        triple(restarts(k_ft), "{:.0f}"),
        ratio(median(restarts(k_ft)), median(restarts(k_tr))),
    )

    k_res, ff_res = bench.of("kill", RESERVE), bench.of("fault-free", RESERVE)
    lost_res = _lost(k_res, ff_res)
    r_res = ratio(median(lost_res), median(lost_tr))
    head["reserve_lost_ratio"] = r_res
    row(
        "2f",
        "rank killed, in-process with a warm reserve (3 ranks: 2 + 1, torchrun): time lost [s] (baseline: torchrun "
        "--max-restarts 3, row 2b; ours: the same 3-rank set-up fault-free vs killed)",
        triple(lost_tr),
        triple(lost_res) + _failed(k_res) + _failed(ff_res),
        r_res,
        f"<= {TARGETS['reserve_time_lost']:.1f}",
        _met(r_res, TARGETS["reserve_time_lost"]),
    )
    row(
        "2g",
        "the same, against ft_launcher's restart (row 2b, ours) [s]",
        triple(lost_ft),
        triple(lost_res),
        ratio(median(lost_res), median(lost_ft)),
    )
    row(
        "2h",
        "warm reserve, how the time splits, seconds after the kill: the rank keeper reports the death / the reserve "
        "and the survivor re-enter training (NVRx: detection, restart barrier, rank reassignment) / resumed from "
        "step 10 / step-15 checkpoint",
        "n/a (a launcher restart: rows 2c, 2d)",
        " / ".join(_seconds(median(_reserve_split(k_res, key))) for key in RESERVE_SPLIT),
        "",
    )

    h_ex, h_co = bench.of("hang", HANG_EXPLICIT), bench.of("hang", HANG_COMPUTED)
    open_ex = [r.hang_open_s() if r.ok else None for r in h_ex]
    open_co = [r.hang_open_s() if r.ok else None for r in h_co]
    m_co = median(open_co)
    head["hang_computed"] = m_co
    computed_timeouts = _clean([r.loaded_step_timeout() for r in h_co])
    default_s = MB_DEFAULT_STEP_TIMEOUT_S
    row(
        "3a",
        f"hang, Megatron Bridge default timeouts (step {default_s:.0f} s, check every "
        f"{MB_DEFAULT_CHECK_INTERVAL_S:.0f} s): detection [s] (not run; from the values). Baseline: torchrun "
        f"has no hang detection, the peer's gloo collective times out after dist.distributed_timeout_minutes",
        f"{MB_DEFAULT_PG_TIMEOUT_S:.0f} (theoretical)",
        f"{default_s:.0f} - {default_s + MB_DEFAULT_CHECK_INTERVAL_S:.0f} (theoretical)",
        ratio(default_s, MB_DEFAULT_PG_TIMEOUT_S),
    )
    row(
        "3b",
        f"hang: detection with explicit step timeout {HANG_SECTION_TIMEOUTS['step']:.0f} s, check every "
        f"{HANG_CHECK_INTERVAL_S:.0f} s (NVRx: 'open for X seconds') [s]; ratio vs defaults",
        f"{default_s:.0f} (defaults)",
        triple(open_ex, "{:.2f}") + _failed(h_ex),
        ratio(median(open_ex), default_s),
    )
    co_note = (
        f" (computed step timeout {triple(computed_timeouts, '{:.2f}')} s)"
        if computed_timeouts
        else (" (ft_state.json NOT loaded)" if h_co else "")
    )
    row(
        "3c",
        "hang, 2nd run with computed timeouts from ft_state.json: detection [s]; ratio vs explicit" + co_note,
        triple(open_ex, "{:.2f}"),
        triple(open_co, "{:.2f}") + _failed(h_co),
        ratio(m_co, median(open_ex)),
        f"<= {TARGETS['hang_computed_s']:.0f} s",
        _met(m_co, TARGETS["hang_computed_s"]),
    )
    lost_ex, lost_co = _lost(h_ex, ff_ft), _lost(h_co, ff_ft)
    row(
        "3d",
        "hang: time lost = launcher wall - median fault-free ft_launcher wall [s] (explicit vs computed)",
        triple(lost_ex),
        triple(lost_co),
        ratio(median(lost_co), median(lost_ex)),
    )

    r_l, r_i = bench.of("raise", LAUNCHER_RESTART), bench.of("raise", INPROCESS)
    reason = notes.get("ipr_reason")
    if reason:
        ours = f"not measured: {reason}"
        row(
            "4a",
            "exception raised at step 13: fault -> first checkpoint after recovery [s] "
            "(ft_launcher restart vs in-process restart)",
            triple(_ev(r_l, "fault", "checkpoint after recovery")) + _failed(r_l),
            ours,
            "n/a",
        )
        row(
            "4b",
            "exception raised: time lost = launcher wall - median fault-free ft_launcher wall [s]",
            triple(_lost(r_l, ff_ft)),
            ours,
            "n/a",
        )
    else:
        a = _ev(r_l, "fault", "checkpoint after recovery")
        b = _ev(r_i, "fault", "checkpoint after recovery")
        row(
            "4a",
            "exception raised at step 13: fault -> first checkpoint after recovery [s] "
            "(ft_launcher restart vs in-process restart + FT)",
            triple(a) + _failed(r_l),
            triple(b) + _failed(r_i),
            ratio(median(b), median(a)),
        )
        la, lb = _lost(r_l, ff_ft), _lost(r_i, ff_ft)
        row(
            "4b",
            "exception raised: time lost = launcher wall - median fault-free ft_launcher wall [s]",
            triple(la),
            triple(lb),
            ratio(median(lb), median(la)),
        )

    if imports:
        base = imports["nemo_run"]
        total = [a + b for a, b in zip(imports["nemo_run"], imports["plugins"], strict=True)]
        r_imp = ratio(median(total), median(base))
        head["import_ratio"] = r_imp
        row(
            "5a",
            f"import time, fresh interpreters x{len(base)} [s] (import nemo_run vs + every plugin of ours)",
            triple(base, "{:.3f}"),
            triple(total, "{:.3f}"),
            r_imp,
            f"<= {TARGETS['import']:.2f}",
            _met(r_imp, TARGETS["import"]),
        )
        row(
            "5b",
            "importing every plugin (`from nemo_resiliency_plugins import *`) on top of nemo_run alone [s]",
            "-",
            triple(imports["plugins"], "{:.3f}"),
            "-",
        )
    else:
        row("5a", "import time", "not measured", "not measured", "n/a")
        row("5b", "importing every plugin on top of nemo_run alone [s]", "not measured", "not measured", "n/a")
    if setup:
        n = setup["n"]
        row(
            "5c",
            f"Experiment.add of {n} run.Script tasks [s] (no plugin vs FaultTolerancePlugin); "
            f"plugin.setup() alone: {triple(setup['setup_only'], '{:.2f}', 1e3 / n)} ms per task",
            triple(setup["without"], "{:.2f}"),
            triple(setup["with"], "{:.2f}"),
            ratio(median(setup["with"]), median(setup["without"])),
        )
    else:
        row("5c", "Experiment.add of 100 tasks", "not measured", "not measured", "n/a")
    return rows, head


def breakdown(bench: Bench) -> list[list[str]]:
    """Where the time of a recovery goes: medians of the intervals between timeline events."""
    spans = [
        ("fault", "detected"),
        ("detected", "restarted"),
        ("restarted", "resumed"),
        ("resumed", "checkpoint after recovery"),
        ("checkpoint after recovery", "finished"),
        ("finished", "job end"),
    ]
    out = []
    for case, variants in (
        ("kill", (TORCHRUN, FT)),
        ("hang", (HANG_EXPLICIT, HANG_COMPUTED)),
        ("raise", (LAUNCHER_RESTART, INPROCESS)),
    ):
        for variant in variants:
            runs = [r for r in bench.of(case, variant) if r.ok]
            if not runs:
                continue
            cells = []
            for a, b in spans:
                m = median(_ev(runs, a, b))
                cells.append("n/a" if m is None else f"{m:.2f}")
            out.append([case, variant, *cells])
    return out


def launcher_phases(bench: Bench) -> list[str]:
    """Measured from the launchers' own log lines: what happens between detection and the new workers."""
    lines = []
    needles = {
        "stop workers (SIGTERM, wait for exit)": (
            "Stopping worker group",
            ["Event: worker_terminated", "Rendezvous'ing worker group"],
        ),
        "rendezvous for the next round": ("Rendezvous'ing worker group", ["Rendezvous complete for workers"]),
        "store-host grace period before exit": ("Store host waiting", ["Agent exits with exit code"]),
    }
    for case, variant in (("kill", TORCHRUN), ("kill", FT), ("fault-free", TORCHRUN), ("fault-free", FT)):
        runs = [r for r in bench.of(case, variant) if r.ok]
        for label, (start, ends) in needles.items():
            vals = []
            for r in runs:
                t0 = r.first([start], launcher_only=True)
                if case == "kill":
                    fault = r.fault_time()
                    t0 = r.first([start], after=fault, launcher_only=True) if fault else None
                t1 = r.first(ends, after=t0, launcher_only=True) if t0 is not None else None
                vals.append(None if t0 is None or t1 is None else t1 - t0)
            if _clean(vals):
                lines.append(f"* {case} / {variant}: {label}: {triple(vals, '{:.2f}')} s")
    # Where a fault-free job's time goes outside the training steps.
    for variant in (TORCHRUN, FT):
        runs = [r for r in bench.of("fault-free", variant) if r.ok]
        spans: dict[str, list[float | None]] = {}
        for r in runs:
            own = [t for t, text, is_own in r.lines if is_own and not _WORKER_PREFIX.match(text)]
            if not own:
                continue
            started = r.first(["Starting worker group"], launcher_only=True)
            done = r.first(["worker group successfully finished"], launcher_only=True)
            ranks_up = r.events()["ranks up"]
            final = r.mtime("final_params.pt")
            points = {
                "NeMo-Run launch -> launcher's first log line": (r.t0, min(own)),
                "launcher start -> workers started": (min(own), started),
                "workers started -> both ranks running (imports)": (
                    started,
                    None if ranks_up is None else r.t0 + ranks_up,
                ),
                "final parameters written -> launcher sees the workers exit": (final, done),
                "workers exited -> launcher's last log line": (done, max(own)),
                "launcher's last log line -> NeMo-Run sees the job end": (max(own), r.t_end),
            }
            for label, (a, b) in points.items():
                spans.setdefault(label, []).append(None if a is None or b is None else b - a)
        for label, vals in spans.items():
            lines.append(f"* fault-free / {variant}: {label}: {triple(vals, '{:.2f}')} s")
    return lines


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell.replace("|", "\\|") for cell in r) + " |" for r in rows]
    return out


def draw_timelines(bench: Bench, out_prefix: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    markers = {
        "fault": ("X", "tab:red"),
        "detected": ("v", "tab:orange"),
        "restarted": ("^", "tab:purple"),
        "resumed": ("o", "tab:blue"),
        "checkpoint after recovery": ("s", "tab:green"),
        "finished": ("*", "black"),
    }
    written = []
    for case, variants, title in (
        ("kill", (TORCHRUN, FT), f"rank {FAULT_RANK} killed at step {FAULT_STEP}"),
        ("hang", (HANG_EXPLICIT, HANG_COMPUTED), f"rank {FAULT_RANK} hung in step {FAULT_STEP}"),
        ("raise", (LAUNCHER_RESTART, INPROCESS), f"exception on rank {FAULT_RANK} at step {FAULT_STEP}"),
    ):
        lanes = []
        for variant in variants:
            runs = sorted((r for r in bench.of(case, variant) if r.ok), key=lambda r: r.wall_s)
            if runs:
                lanes.append((variant, runs[len(runs) // 2]))
        if not lanes:
            continue
        fig, ax = plt.subplots(figsize=(11, 2.0 + 1.1 * len(lanes)))
        for y, (_variant, run) in enumerate(lanes):
            ev = run.events()
            ax.barh(y, ev["job end"], left=0, height=0.35, color="0.88", edgecolor="0.6")
            if ev["fault"] is not None and ev["resumed"] is not None:
                ax.barh(y, ev["resumed"] - ev["fault"], left=ev["fault"], height=0.35, color="tab:red", alpha=0.25)
            for name, (marker, color) in markers.items():
                if ev.get(name) is not None:
                    ax.plot(
                        ev[name],
                        y,
                        marker=marker,
                        color=color,
                        markersize=10,
                        linestyle="none",
                        label=name if y == 0 else None,
                    )
            ax.text(ev["job end"], y + 0.28, f" {run.wall_s:.1f} s", va="bottom", fontsize=8)
        ax.set_yticks(range(len(lanes)), [f"{v}\n(median run)" for v, _ in lanes])
        ax.set_xlabel("seconds since launch (light bar: job; red: fault -> resumed)")
        ax.set_title(f"{title}: fault, detection, restart, resume, first checkpoint after recovery, finish")
        ax.set_ylim(-0.6, len(lanes) - 0.3)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=8, ncol=6)
        fig.tight_layout()
        path = Path(f"{out_prefix}-{case}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="1 repetition, shorter steps (CI)")
    parser.add_argument("--repeat", type=int, default=None, help="runs per case (default 3; 1 with --smoke)")
    parser.add_argument("--import-repeat", type=int, default=None, help="fresh interpreters (default 5; smoke 1)")
    parser.add_argument("--setup-tasks", type=int, default=100, help="tasks in the Experiment.add benchmark")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--keep", action="store_true", help="keep the jobs' logs and checkpoints")
    parser.add_argument("--job-timeout", type=float, default=None, help="end a job after this long (default 300 s)")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated subset of {','.join(CASES)} (development; default all)",
    )
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := sorted(set(cases) - set(CASES)):
        parser.error(f"--cases: unknown {', '.join(unknown)}; allowed: {', '.join(CASES)}")
    repeat = args.repeat or (1 if args.smoke else 3)
    import_repeat = args.import_repeat or (1 if args.smoke else 5)
    step_time = "0.05" if args.smoke else "0.1"

    started = time.time()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"recovery-{date}" + ("-smoke" if args.smoke else "")
    work = Path(tempfile.mkdtemp(prefix="nrp-bench-"))
    # NeMo-Run reads NEMORUN_HOME when it is imported: the benchmark's experiments stay in its work directory.
    os.environ["NEMORUN_HOME"] = str(work / "nemorun-home")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.path.insert(0, str(REPO))

    def say(msg: str) -> None:
        print(msg, flush=True)

    load = {"start": os.getloadavg()[0], "foreign_start": foreign_jobs()}
    say(f"recovery benchmark: {repeat} repetition(s), step time {step_time} s, work dir {work}")
    say(f"load(1 min) {load['start']:.2f}; training processes of others running: {load['foreign_start']}")

    say("5. imports (fresh interpreters) ...")
    imports = measure_imports(work, import_repeat)
    setup = None
    say(f"5. Experiment.add of {args.setup_tasks} tasks ...")
    try:
        setup = measure_setup(work, args.setup_tasks, repeat) | {"n": args.setup_tasks}
    except RuntimeError as e:
        say(str(e))

    bench = Bench(work, step_time, say)
    bench.job_timeout = args.job_timeout or 300.0
    notes: dict[str, Any] = {}

    def report(final: bool) -> tuple[list[str], str, Path]:
        load.update(end=os.getloadavg()[0], foreign_end=foreign_jobs())
        load["jobs"] = triple([r.load1 for r in bench.runs], "{:.2f}")
        rows, _ = build_table(bench, notes, imports, setup)
        header = [
            "#",
            "measurement",
            "baseline: min / median / max",
            "ours: min / median / max",
            "ratio ours / baseline (medians)",
            "target",
            "met?",
        ]
        table = markdown_table(header, rows)
        png_note = "drawn at the end of the run"
        if final:
            try:
                pngs = draw_timelines(bench, args.out / stem)
                png_note = ", ".join(f"`{p.name}`" for p in pngs) or "none (no successful fault run)"
            except ImportError as e:
                png_note = f"not drawn: {e} (pip install matplotlib)"
        elapsed = time.time() - started
        progress = "" if final else f" PARTIAL: {len(bench.runs)} of {bench.total} jobs done, still running."

        ft_state = notes.get("ft_state")
        doc = [
            f"# Recovery benchmarks, {date}" + (" (smoke)" if args.smoke else ""),
            "",
            f"Command: `{' '.join([Path(sys.executable).name, 'benchmarks/recovery.py', *(argv or sys.argv[1:])])}` "
            f"- {repeat} repetition(s) per case, {len(bench.runs)} jobs, {elapsed / 60:.1f} min in all.{progress}",
            "",
            f"Workload: the reference workload, 2 CPU ranks (torch + gloo), {STEPS} steps of {step_time} s extra "
            f"compute each, a checkpoint every {SAVE_INTERVAL} steps; faults on rank {FAULT_RANK} at step "
            f"{FAULT_STEP} (every recovery resumes from step 10). Launch: NeMo-Run Experiment + LocalExecutor "
            '(ntasks_per_node=2). Baseline torchrun: `launcher="torchrun"`, `PET_MAX_RESTARTS=3` in the executor '
            "environment (NeMo-Run's run.Torchrun has no restart field). Ours: `FaultTolerancePlugin(num_in_job_"
            "restarts=3)` with its defaults (Megatron Bridge's: step 180 s, check every 5 s) for cases 1-2; "
            f"section timeouts {HANG_SECTION_TIMEOUTS}, check every {HANG_CHECK_INTERVAL_S:.0f} s for case 3; step "
            "30 s, check every 1 s for case 4 (both variants), in-process restart with rank granularity, soft/hard "
            "timeout 20/30 s.",
            "",
            *machine_description(load),
            "## Results",
            "",
            *table,
            "",
            "Ratios are of medians. Time lost subtracts the median fault-free wall of the same launcher. "
            "Per-step time (1c) is the median of rank 0's iterations that wrote no checkpoint, timed by the "
            "workload from the FT step-start hook to the end of the iteration (`STEP_TIMES` line); 1f spans "
            f"steps {SAVE_INTERVAL} -> {STEPS} by the checkpoint files' modification times, so it includes three "
            "checkpoints with their FT `checkpointing` section. Both leave process start-up out; start-up and "
            "shut-down are rows 1d/1e. Launcher wall (1b, and every time lost) runs from the launcher's first "
            "to its last own-timestamped log line: it leaves out NeMo-Run's packaging before the job and its "
            "2-second status polling after it, which the NeMo-Run wall (1a, 2a) includes.",
            "",
            "## Where the time of a recovery goes (medians, seconds)",
            "",
            *markdown_table(
                [
                    "case",
                    "variant",
                    "fault -> detected",
                    "detected -> workers restarted",
                    "restarted -> resumed",
                    "resumed -> checkpoint 15",
                    "checkpoint 15 -> finished",
                    "finished -> job end",
                ],
                breakdown(bench),
            ),
            "",
            "Launcher phases, from the launchers' own timestamped log lines (min / median / max):",
            "",
            *(launcher_phases(bench) or ["* (no launcher lines found)"]),
            "",
            "Event sources: fault = the time the injecting rank wrote its fault marker; detected = the launcher's "
            "first failure line (torchrun `Worker group FAILED`, NVRx `failure_detected` / `Section 'step' has "
            "been open for`); restarted = the launcher's next `Starting worker group` (in-process: the later rank's "
            "`INPROCESS iteration=1` time); resumed = arrival of the later rank's `RESUMED` line in the job log "
            "(polled every 0.1 s); checkpoint 15 / finished = file modification times.",
            "",
            f"Computed timeouts used by 3c (ft_state.json of a fault-free ft_launcher run): `{json.dumps(ft_state)}`"
            if ft_state
            else "3c: no ft_state.json was available from case 1.",
            "",
            f"Timelines (median run of each variant): {png_note}.",
            "",
        ]
        text = "\n".join(doc)
        md_path = args.out / f"{stem}.md"
        md_path.write_text(text)
        return table, png_note, md_path

    bench.after_job = lambda: report(final=False)
    run_jobs(bench, repeat, notes, cases)
    table, png_note, md_path = report(final=True)
    say("")
    say("\n".join(table))
    say("")
    say(f"written: {md_path} ({(time.time() - started) / 60:.1f} min); timelines: {png_note}")
    if args.keep:
        say(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
