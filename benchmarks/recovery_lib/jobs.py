"""One benchmark job (NeMo-Run ``Experiment`` + ``LocalExecutor``) and its timeline, and the bench that launches,
stops and keeps them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nemo_resiliency_plugins.job import log_lines as ll
from recovery_lib.logs import _WORKER_PREFIX, LogTail, line_time
from recovery_lib.settings import FAULT_RANK, FAULT_STEP, SAVE_INTERVAL, STEPS


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
            m = ll.WORKLOAD_INPROCESS_TIMED.search(text)
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
        m = ll.NVRX_SECTION.search(hits[0][1])
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
