"""Fault injection for the reference workload, from the ``NRP_*`` environment variables.

``NRP_FAULT`` names one fault (``kill``, ``hang``, ``raise``, ``sigterm``, ``corrupt_local``, ``slow``,
``slow_node``, ``nan``, ``nan_persistent``) injected at step ``NRP_FAULT_STEP`` on rank ``NRP_FAULT_RANK``, or a
*chain* of the once-only kinds, ``kind@step`` items separated by commas (``NRP_FAULT=kill@13,hang@17``): one launch then
proves several recoveries in a row, each with its own log lines, exactly as a job that fails more than once in
its life would meet them (the restart budget must allow every one of them).

Once-only kinds (kill/hang/raise/sigterm) are injected once per save directory: a marker file in
``checkpoint.save`` (``nrp_fault_injected`` for the first fault of a chain, ``nrp_fault_injected.<i>`` for the
i-th after it) stops a restarted attempt from injecting that fault again. The faults of a chain are injected
in order: fault *i* only once fault *i-1*'s marker exists, at the first time its step is reached after that. A
single fault without ``checkpoint.save`` has no marker and every attempt injects it; a chain needs the save
directory (it is refused without one).

``NRP_FAULT_REPEAT`` makes a single once-only fault a *crash loop*: ``same`` injects it at step NRP_FAULT_STEP in
every attempt (a rank that dies at the same step however often it is restarted: no progress), ``after_resume``
injects it NRP_FAULT_STEP steps after the step each attempt resumed from (a rank that fails again later in each
cycle: progress every time). No marker is written or read; a chain cannot repeat.

``corrupt_local`` models a node that crashed after NVRx renamed a local checkpoint it had not synced: the rank
cuts its newest local checkpoint file (``<non_persistent_local_ckpt_dir>/<rank>/iter_*_local.pt``) to half its
size, then dies by SIGKILL. It needs local checkpoints (refused without the directory).

``slow`` models a persistently slow rank: it applies on every step >= NRP_FAULT_STEP of every attempt (its
compute part takes 3x as long). ``slow_node`` models a slow *node*, which stays slow whatever runs on it: the
first attempt's rank NRP_FAULT_RANK writes its node's name (``SLURMD_NODENAME``, else the host name) to
``nrp_slow_node`` in ``checkpoint.save``, and from then on every rank that starts on that node is slow, in
every attempt; a job requeued away from the node runs at full speed. ``nan`` adds NaN to the model output, hence
to the loss and the gradients, of step NRP_FAULT_STEP once (a transient fault: a re-run of the step is clean);
``nan_persistent`` adds it on every
run of that step in the attempt that injects it (the re-run reproduces it). Both use the marker, so a restarted
attempt is clean. Neither can be part of a chain.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Any

from nemo_resiliency_plugins.job.local_checkpoint_guard import LOCAL_FILE
from nemo_resiliency_plugins.testing.rank_log import log

__all__ = [
    "CHAINABLE_KINDS",
    "FAULT_KINDS",
    "FAULT_MARKER",
    "SPOOF_LINES",
    "FaultInjector",
    "FaultSpec",
    "marker_name",
    "print_spoof_lines",
]

FAULT_KINDS = ("kill", "hang", "raise", "sigterm", "corrupt_local", "slow", "slow_node", "nan", "nan_persistent")
SLOW_NODE_FILE = "nrp_slow_node"
CHAINABLE_KINDS = ("kill", "hang", "raise", "sigterm", "corrupt_local")
LOSS_FAULTS = ("nan", "nan_persistent")
FAULT_MARKER = "nrp_fault_injected"
REPEAT_MODES = ("same", "after_resume")
_CHAIN_ITEM = re.compile(r"([a-z_]+)@([0-9]+)")


def marker_name(index: int) -> str:
    """The marker file of the ``index``-th fault of a chain (the first one keeps the historical name)."""
    return FAULT_MARKER if index == 0 else f"{FAULT_MARKER}.{index}"


@dataclasses.dataclass(frozen=True)
class FaultSpec:
    """Fault injection settings. ``kind``/``step`` are the first (or only) fault; ``then`` the rest of a chain."""

    kind: str | None = None
    step: int = 0
    rank: int = 1
    step_time: float = 0.05
    then: tuple[tuple[str, int], ...] = ()
    #: None (once per save directory), "same" or "after_resume" (every attempt; see the module docstring)
    repeat: str | None = None

    @property
    def chain(self) -> tuple[tuple[str, int], ...]:
        """Every fault to inject, in order, as ``(kind, step)``."""
        return () if self.kind is None else ((self.kind, self.step), *self.then)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> FaultSpec:
        env = os.environ if env is None else env
        value = env.get("NRP_FAULT", "").strip().lower()
        rank = int(env.get("NRP_FAULT_RANK", "1"))
        step_time = float(env.get("NRP_STEP_TIME", "0.05"))
        repeat = env.get("NRP_FAULT_REPEAT", "").strip().lower() or None
        if repeat not in (None, *REPEAT_MODES):
            raise ValueError(f"NRP_FAULT_REPEAT={repeat!r}: expected one of {', '.join(REPEAT_MODES)}")
        if "@" not in value and "," not in value:
            kind = value or None
            if kind is not None and kind not in FAULT_KINDS:
                raise ValueError(f"NRP_FAULT={kind!r}: expected one of {', '.join(FAULT_KINDS)}")
            if repeat is not None and kind not in CHAINABLE_KINDS:
                raise ValueError(f"NRP_FAULT_REPEAT needs one of {', '.join(CHAINABLE_KINDS)} (NRP_FAULT={value!r})")
            return cls(
                kind=kind, step=int(env.get("NRP_FAULT_STEP", "0")), rank=rank, step_time=step_time, repeat=repeat
            )
        if repeat is not None:
            raise ValueError("NRP_FAULT_REPEAT applies to a single fault, not to a chain")
        chain = []
        for item in value.split(","):
            m = _CHAIN_ITEM.fullmatch(item.strip())
            if m is None or m.group(1) not in CHAINABLE_KINDS:
                raise ValueError(
                    f"NRP_FAULT={value!r}: a chain is kind@step items separated by commas, kind one of "
                    f"{', '.join(CHAINABLE_KINDS)} (got {item.strip()!r})"
                )
            chain.append((m.group(1), int(m.group(2))))
        (kind, step), *then = chain
        return cls(kind=kind, step=step, rank=rank, step_time=step_time, then=tuple(then))


class FaultInjector:
    """Injects the faults of a :class:`FaultSpec` on the rank it names; the training loop calls it each step."""

    def __init__(self, spec: FaultSpec, rank: int, world: int, save_dir: str | None, checkpoint: Any = None) -> None:
        self.spec = spec
        self.rank = rank
        self.active = spec.kind is not None and rank == spec.rank
        if spec.kind == "slow_node":
            self.active = self._on_slow_node(save_dir)
        if spec.then and not save_dir:
            raise ValueError("NRP_FAULT: a chain of faults needs checkpoint.save (its markers live there)")
        # ``checkpoint``: the job's CheckpointConfig; corrupt_local damages this rank's local checkpoint files.
        local = checkpoint is not None and checkpoint.non_persistent_ckpt_type == "local"
        local_dir = checkpoint.non_persistent_local_ckpt_dir if local else None
        if any(kind == "corrupt_local" for kind, _ in spec.chain) and not local_dir:
            raise ValueError("NRP_FAULT=corrupt_local needs local checkpoints (non_persistent_ckpt_type='local')")
        self.local_dir = os.path.join(local_dir, str(rank)) if local_dir else None
        self.save_dir = save_dir
        self.marker = os.path.join(save_dir, FAULT_MARKER) if save_dir else None
        # Whether an earlier attempt in this save dir already injected (nan_persistent looks at this only).
        self.injected_before = self.marker is not None and os.path.exists(self.marker)
        self._slow_announced = False
        self._loss_fault_done = False
        self._first_step: int | None = None  # the step this attempt started from (NRP_FAULT_REPEAT=after_resume)
        if spec.kind is not None and not 0 <= spec.rank < world and rank == 0:
            log(f"NOTE NRP_FAULT={spec.kind} ignored: NRP_FAULT_RANK={spec.rank} not in world of {world}")

    def _on_slow_node(self, save_dir: str | None) -> bool:
        """``slow_node``: whether this rank runs on the slow node (named by the first attempt's faulty rank)."""
        if not save_dir:
            raise ValueError("NRP_FAULT=slow_node needs checkpoint.save (the slow node's name is kept there)")
        here = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        path = os.path.join(save_dir, SLOW_NODE_FILE)
        if not os.path.exists(path) and self.rank == self.spec.rank:
            os.makedirs(save_dir, exist_ok=True)
            with open(path, "w") as f:
                f.write(here + "\n")
        try:
            with open(path) as f:
                slow = f.read().strip()
        except FileNotFoundError:
            return False
        if slow == here:
            log(f"SLOW_NODE {here} rank={self.rank}")
        return slow == here

    def compute_delay(self, step: int) -> float:
        """Extra sleep inside the compute part of this step (the straggler effect)."""
        if self.active and self.spec.kind in ("slow", "slow_node") and step >= self.spec.step:
            if not self._slow_announced:
                self._slow_announced = True
                log(f"FAULT_INJECTED kind={self.spec.kind} step={step} rank={self.rank}")
            return 3.0 * self.spec.step_time
        return self.spec.step_time

    def _pending(self) -> tuple[int, str, int] | None:
        """(index, kind, step) of the first fault of the chain whose marker is not written yet."""
        for index, (kind, step) in enumerate(self.spec.chain):
            if self.save_dir is None or not os.path.exists(os.path.join(self.save_dir, marker_name(index))):
                return index, kind, step
        return None

    def _write_marker(self, index: int, kind: str, step: int) -> None:
        if self.save_dir is None:
            return
        with open(os.path.join(self.save_dir, marker_name(index)), "w") as f:
            f.write(f"kind={kind} step={step} rank={self.rank} pid={os.getpid()} time={time.time()}\n")
            f.flush()
            os.fsync(f.fileno())

    def maybe_inject(self, step: int) -> None:
        """Called inside the step (between on_training_step_start and on_training_step_end)."""
        if not self.active or self.spec.kind in ("slow", "slow_node") or self.spec.kind in LOSS_FAULTS:
            return
        if self._first_step is None:
            self._first_step = step
        if self.spec.repeat is not None:
            target = self.spec.step + (self._first_step if self.spec.repeat == "after_resume" else 0)
            if step == target:
                self._inject(self.spec.kind, step)
            return
        pending = self._pending()
        if pending is None or pending[2] != step:
            return
        index, kind, _ = pending
        self._write_marker(index, kind, step)
        self._inject(kind, step)

    def _inject(self, kind: str, step: int) -> None:
        log(f"FAULT_INJECTED kind={kind} step={step} rank={self.rank}")
        if kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached in practice
        elif kind == "hang":
            threading.Event().wait()
        elif kind == "raise":
            raise RuntimeError(f"NRP injected fault at step {step} on rank {self.rank}")
        elif kind == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif kind == "corrupt_local":
            self._cut_newest_local()
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached in practice

    def _cut_newest_local(self) -> None:
        assert self.local_dir is not None
        names = sorted(n for n in os.listdir(self.local_dir) if LOCAL_FILE.fullmatch(n))
        if not names:
            raise RuntimeError(f"NRP_FAULT=corrupt_local: no local checkpoint in {self.local_dir} to damage")
        path = os.path.join(self.local_dir, names[-1])
        size = os.path.getsize(path)
        os.truncate(path, size // 2)
        log(f"FAULT_CORRUPTED {path} from {size} to {size // 2} bytes")

    def loss_fault(self, step: int) -> bool:
        """Whether to add NaN to this (re-)run's loss (the ``nan`` and ``nan_persistent`` kinds)."""
        kind = self.spec.kind
        if not self.active or kind not in LOSS_FAULTS or step != self.spec.step:
            return False
        if kind == "nan" and (self._loss_fault_done or (self.marker is not None and os.path.exists(self.marker))):
            return False  # transient: injected once, so the re-run of the step is clean
        self._loss_fault_done = True
        if kind == "nan_persistent" and self.injected_before:
            return False  # reproducible within the attempt that injects it, not after a restart
        if self.marker is not None and not os.path.exists(self.marker):
            self._write_marker(0, kind, step)
        log(f"FAULT_INJECTED kind={kind} step={step} rank={self.rank}")
        return True


#: ``NRP_SPOOF_LINES=1``: what a careless training script may print (issue 51, issue 47 class 15): NVRx 0.7's own
#: verdict lines, verbatim (log_manager.py's format; launcher.py's no-restart and exit lines, the rendezvous's
#: assignment, torch's agent's success line). Written by a rank, each reaches the log under torch elastic's
#: ``[default<n>]:`` prefix, and the requeue guard and the report must not take it for the launcher's: a job that
#: prints them ends as it would without them. The no-restart reason here is one NVRx would not give in these jobs
#: (a real crash loop's is ``no_progress``), so a reading that took the rank's line would name the wrong reason.
SPOOF_LINES = (
    "2026-12-05 07:47:35,237 [ERROR] [vm] [workload:?(?) infra:0(0)] launcher.py:3740 NVRx decided the job must "
    "not be restarted (attribution_stop): Attribution requested a stop.. Agent's exit code = 93",
    *(
        f"2026-12-07 06:12:44,265 [INFO] [vm] [workload:?(?) infra:{task}(0)] launcher.py:3753 "
        "Agent exits with exit code = 0."
        for task in range(4)
    ),
    "2026-12-07 06:10:36,838 [INFO] [vm] [workload:?(?) infra:3(0)] ft_rendezvous_barrier.py:2752 "
    "Assigned active rank 0 (round=0)",
    # torch's agent's success line as NVRx's launcher logs it: the report's "finished" verdict
    "2026-12-07 06:12:40,028 [INFO] [vm] [workload:?(?) infra:0(0)] launcher.py:672 [default] worker group "
    "successfully finished. Waiting 300 seconds for other agents to finish.",
)


def print_spoof_lines(env: dict[str, str] | None = None) -> bool:
    """Print :data:`SPOOF_LINES` on stdout as they are (no rank prefix of the workload's own) when
    ``NRP_SPOOF_LINES=1``; True when it did."""
    if (os.environ if env is None else env).get("NRP_SPOOF_LINES") != "1":
        return False
    sys.stdout.write("".join(line + "\n" for line in SPOOF_LINES))
    sys.stdout.flush()
    return True
