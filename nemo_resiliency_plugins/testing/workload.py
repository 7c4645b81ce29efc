"""Reference workload: a small deterministic CPU training loop driven by Megatron Bridge's resiliency code.

It exists so that the plugins can be proven end to end on a machine without GPUs. The *configuration*, the
*override parsing* and the *fault-tolerance integration* are Megatron Bridge's real code; only the model and
the training step are a toy (a ``torch.nn.Linear`` trained with a hand-written gradient all-reduce over gloo),
because Megatron Bridge's real model/optimizer setup needs CUDA.

What runs for real (Megatron Bridge 0.6):
    * ``megatron.bridge.training.config.ConfigContainer`` and its sub-configs, built by
      :func:`reference_config` (or, as a fiddle tree, by :func:`reference_config_buildable`), completed by its own
      ``runtime_config_update`` (environment variables, data-parallel size, ``validate()``).
    * Script path: Megatron Bridge's Hydra override applier
      ``process_config_with_overrides(cfg, cli_overrides=argv)``.
    * ``GlobalState`` / ``TrainState`` / ``FaultToleranceState`` (TrainState is checkpointed via its state_dict).
    * ``megatron.bridge.training.fault_tolerance``: ``setup``, ``maybe_setup_simulated_fault``,
      ``on_checkpoint_loaded``, ``on_training_step_start/end``, ``on_checkpointing_start/end``, ``shutdown``,
      including its ``ft_state.json`` timeout persistence in the checkpoint directory.
    * ``megatron.bridge.training.utils.sig_utils.DistributedSignalHandler`` (through
      ``GlobalState.signal_handler``) when ``cfg.train.exit_signal_handler`` is set.
    * NVRx straggler detection when ``cfg.nvrx_straggler`` is set: Megatron Bridge's own
      ``NVRxStragglerDetectionManager`` (``GlobalState.nvrx_straggler_manager``) is initialised, wraps the train
      step, is checked after every iteration with ``check_nvrx_straggler_detection`` (its report names the slow
      rank on the logger ``nvrx_straggler.logger_name``; with ``stop_if_detected`` the loop saves a checkpoint
      and ends with exit code 0, as Megatron Bridge's ``checkpoint_and_decide_exit`` does) and is shut down with
      ``safe_shutdown_nvrx_straggler_manager``. NVRx's ``Detector`` computes the scores.
    * Megatron Core's re-run state machine, initialised by Megatron Bridge's ``init_rerun_state`` from
      ``cfg.rerun_state_machine``: each step runs inside ``should_run_forward_backward`` with the data behind a
      ``RerunDataIterator``, the loss goes through Megatron Bridge's ``masked_next_token_loss`` (which validates
      it when ``check_for_nan_in_loss`` / ``check_for_spiky_loss`` are on), and ``should_checkpoint_and_exit``
      decides the exit code (16 or 17) like Megatron Bridge's ``train_step``/``train``.
    * In-process restart when ``cfg.inprocess_restart.enabled``: the training loop is wrapped with Megatron
      Bridge's own ``maybe_wrap_for_inprocess_restart`` (its coordination TCPStore, NVRx ``inprocess.Wrapper``
      with Megatron Bridge's rank assignment, finalize/abort/health-check chain and timeouts) and called like
      Megatron Bridge's ``pretrain`` calls it; each restart iteration builds its process group on a
      ``PrefixStore(<iteration>, store)``, as Megatron Bridge's ``_pretrain`` does, and resumes from the last
      checkpoint in the same processes (:mod:`~nemo_resiliency_plugins.testing.inprocess_loop`).
    * Local checkpoints when ``checkpoint.non_persistent_ckpt_type == "local"``: NVRx's ``LocalCheckpointManager``
      with Megatron Core's ``MCoreTensorAwareStateDict``, Megatron Bridge's schedule and local-vs-persistent
      choice at start (:mod:`~nemo_resiliency_plugins.testing.mcore_checkpoint`; algo ``atomic`` on CPU, the
      CUDA-only upstream paths and ``checkpoint.async_save`` are refused there, naming the call).

Known differences from Megatron Bridge 0.6.2's real ``pretrain()`` (found by running it on an H200 under each
plugin, ``benchmarks/results/gpu/pretrain/summary.md``; paths under ``megatron/bridge/training/``). Fixed here:
resuming only from ``checkpoint.load`` (``setup.py:_should_load_checkpoint``), never from ``checkpoint.save``, and
the legacy tracker file written with the bare iteration once a save is complete. Kept, and why it does not change
what the smoke proofs show:
    * Checkpoint layout: Megatron Bridge saves ``iter_NNNNNNN/`` directories (``torch_dist``) and
      ``latest_train_state.pt``, and writes ``latest_checkpointed_iteration.txt`` "for compatibility" in the
      same finalize step; the workload saves one ``iter_NNNNNNN.pt`` file and the same tracker file. NVRx's
      progress tracker reads the tracker file in both.
    * Resume log line: Megatron Bridge logs ``successfully loaded checkpoint from <dir> ... at iteration N``;
      the workload ``RESUMED from step N`` (what the tests and ``rehearse`` read).
    * Exit paths: Megatron Bridge's ``train`` ends with ``sys.exit(code)`` (signal 0, re-run 16/17, straggler
      stop, ``exit_interval``, ``exit_duration_in_mins``) and ``pretrain`` logs that ``SystemExit`` as "Pretrain
      failed" and aborts its process groups; the workload exits with the same codes without that log line.
      ``train.exit_interval`` and ``train.exit_duration_in_mins`` are not implemented here.
    * Changing ``train.train_iters`` between runs: Megatron Core's scheduler refuses a checkpoint written for
      another value (``OptimizerParamScheduler._check_and_set``) unless ``scheduler.override_opt_param_scheduler``
      is set; the workload accepts it.
    * In-process restart: Megatron Bridge 0.6.2 hands its training function no NVRx ``CallWrapper``
      (Megatron-Bridge#5187): its own failure clean-up runs before NVRx's abort, and every restart reuses the
      same store keys. The workload builds the per-attempt ``PrefixStore`` itself, so its in-process proofs
      show NVRx's machinery, not that bug (``known_bugs`` warns about it; on the H200 a 1-rank real job did
      recover in the same process, a multi-rank one is unproven).
    * Local checkpoints: on the H200 Megatron Bridge's real loop loaded the local checkpoint when it was newer
      than the persistent one (step 24 over 20) and the persistent one when newer (35 over a local 34), and a
      truncated local file failed every attempt with no fallback; the workload's ``mcore_checkpoint.choose`` and
      its load do the same (``benchmarks/results/gpu/2026-12-04-evening/summary.md``).
    * No evaluation steps, no async-save finalisation inside the ``checkpointing`` section, no CUDA or
      ModelOpt prerequisites (Megatron Bridge's ``train.py`` imports ``modelopt``); data resumes from a
      checkpointed RNG stream instead of skipping consumed samples (both bit-exact).

CPU accommodations: each is marked ``# CPU accommodation:`` in the code and listed, with why, in
:mod:`~nemo_resiliency_plugins.testing.cpu_accommodations`.

Interfaces
----------
Script::

    torchrun --standalone --nproc-per-node=2 -m nemo_resiliency_plugins.testing.workload [hydra overrides...]
    python -m nemo_resiliency_plugins.testing.workload checkpoint.save=/tmp/ck train.train_iters=20

Python (e.g. ``run.Partial(pretrain, config=reference_config_buildable(d))``)::

    pretrain(reference_config("/tmp/ck"))

Environment variables (all optional; fault injection in detail: :mod:`~nemo_resiliency_plugins.testing.faults`):
    ``NRP_FAULT``       one of kill, hang, raise, sigterm, slow, slow_node, nan, nan_persistent; or a chain of the
                        first four,
                        ``kind@step`` items separated by commas (``kill@13,hang@17``: one launch, two recoveries)
    ``NRP_FAULT_STEP``  step (number of completed iterations) at which to inject; default 0
    ``NRP_FAULT_RANK``  global rank that injects; default 1
    ``NRP_STEP_TIME``   extra sleep per step in seconds; default 0.05
    ``NRP_SAVE_DIR``    script path only: default for ``checkpoint.save`` (an override still wins)
    ``NRP_IPR_PG_TIMEOUT``  in-process restart only: gloo process-group timeout in seconds; default 10
    ``NRP_DEVICE``      ``cpu`` (default: gloo) or ``cuda`` (GPU mode, :mod:`~nemo_resiliency_plugins.testing.devices`:
                        model and batches on GPU ``LOCAL_RANK``, NCCL, the step's extra compute time in a GPU kernel)

kill/hang/raise/sigterm are injected once per save directory (a marker file in ``checkpoint.save``); ``slow``
applies on every step >= NRP_FAULT_STEP; ``nan`` is transient, ``nan_persistent`` reproducible within the
attempt that injects it.

Log lines (stdout, flushed, each prefixed with ``[rank<r>] ``; Megatron Bridge's lines and the summaries are worded
in :mod:`~nemo_resiliency_plugins.testing.workload_lines`):
    ``START rank=<r> world=<w> restart=<TORCHELASTIC_RESTART_COUNT>``
    ``CONFIG <json>`` (rank 0: parsed ft/straggler/in-process-restart/train/checkpoint fields and types)
    ``RESUMED from step <n>`` or ``STARTING from scratch``
    ``FAULT_INJECTED kind=<k> step=<s> rank=<r>``
    ``CHECKPOINT saved step=<n>`` (rank 0)
    ``EXIT on signal step=<n>`` (exit-signal handler path; the process then exits 0)
    ``STRAGGLER_REPORT step=<n> elapsed_s=<s>`` (rank 0, each time NVRx's report interval elapsed; the
    report itself is logged by Megatron Bridge's manager: ``STRAGGLER DETECTION WARNING ...``,
    ``GPU relative performance:`` followed by ``Rank=<r> Node=<n> Score=<s>`` lines)
    ``EXIT on straggler step=<n>`` (``stop_if_detected``; the process then exits 0)
    ``EXIT rerun_state_machine exit_code=<c> step=<n>`` (the process then exits with that code)
    ``FINISHED step=<n> params_sha256=<hex>`` (rank 0)
    `` [<Y-m-d H:M:S>] iteration <n>/<train_iters> | consumed samples: <c> | elapsed time per iteration (ms): <t> |``
    (last rank, every ``logger.log_interval`` iterations, no rank prefix: Megatron Bridge's own training_log line)
    With ``NRP_SPOOF_LINES=1``, after ``START``: NVRx's own verdict lines, verbatim (no rank prefix;
    testing/faults.py's ``SPOOF_LINES``), which the guard and the report must not take for the launcher's.
    ``STEP_TIMES n=<k> median_ms=<m> min_ms=<a> max_ms=<b>`` (rank 0, after its loop: iterations without a
    checkpoint, FT hooks included)
    ``INPROCESS iteration=<i> pid=<pid> time=<unix s>`` (in-process restart: each entry into the loop)
    ``INPROCESS completed pid=<pid> iterations=<n>`` (in-process restart: the wrapper returned)

Files in ``checkpoint.save``: ``iter_<step:07d>.pt`` (written atomically by rank 0; model, optimizer,
TrainState and every rank's RNG/data-stream state), ``latest_checkpointed_iteration.txt`` (an iteration
number, readable by ft_launcher's ``--ft-checkpoint-iteration-file``), ``final_params.pt`` (rank 0, end of
training), ``ft_state.json`` (written by Megatron Bridge when ``ft.calc_ft_timeouts`` is on) and the fault
marker.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

from nemo_resiliency_plugins.testing.faults import FAULT_KINDS, FaultInjector, FaultSpec, print_spoof_lines
from nemo_resiliency_plugins.testing.process_group import init_process_group
from nemo_resiliency_plugins.testing.rank_log import log as _log
from nemo_resiliency_plugins.testing.rank_log import rank_from_env as _rank_from_env
from nemo_resiliency_plugins.testing.rank_log import route_logger as _route_logger
from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

# Importing Megatron Bridge creates millions of objects (every model bridge it ships); the cyclic garbage
# collector, run again and again while they appear, adds ~10% to every rank's start-up. It is off during the
# imports below and on again after them.
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()
ensure_megatron_bridge_importable()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from megatron.bridge.training import fault_tolerance  # noqa: E402
from megatron.bridge.training import nvrx_straggler as mb_nvrx_straggler  # noqa: E402
from megatron.bridge.training.config import ConfigContainer, runtime_config_update  # noqa: E402
from megatron.bridge.training.initialize import init_rerun_state  # noqa: E402
from megatron.bridge.training.losses import masked_next_token_loss  # noqa: E402
from megatron.bridge.training.state import GlobalState  # noqa: E402
from megatron.bridge.training.utils.log_utils import barrier_and_log  # noqa: E402
from megatron.core.rerun_state_machine import (  # noqa: E402
    RerunDataIterator,
    destroy_rerun_state_machine,
    get_rerun_state_machine,
)

from nemo_resiliency_plugins.testing import cpu_accommodations as cpu  # noqa: E402
from nemo_resiliency_plugins.testing import inprocess_loop, mcore_checkpoint  # noqa: E402
from nemo_resiliency_plugins.testing.checkpoint_files import (  # noqa: E402
    CKPT_FORMAT,
    FINAL_PARAMS,
    TRACKER_FILE,
    atomic_torch_save,
    atomic_write_bytes,
    checkpoint_step,
    newest_checkpoint,
)
from nemo_resiliency_plugins.testing.devices import (  # noqa: E402
    backend_for,
    cuda_device_index,
    device_from_env,
    spend_compute_time,
    torch_device,
)
from nemo_resiliency_plugins.testing.reference_config import (  # noqa: E402
    no_env_vars,
    reference_config,
    reference_config_buildable,
)
from nemo_resiliency_plugins.testing.straggler_hooks import check_nvrx_straggler as _check_nvrx_straggler  # noqa: E402
from nemo_resiliency_plugins.testing.straggler_hooks import setup_nvrx_straggler as _setup_nvrx_straggler  # noqa: E402
from nemo_resiliency_plugins.testing.workload_lines import (  # noqa: E402
    config_summary,
    iteration_line,
    params_sha256,
    setup_line,
    step_times_line,
)

if _GC_WAS_ENABLED:
    gc.enable()

__all__ = [
    "FAULT_KINDS",
    "FaultSpec",
    "backend_for",
    "cuda_device_index",
    "device_from_env",
    "main",
    "no_env_vars",
    "params_sha256",
    "pretrain",
    "reference_config",
    "reference_config_buildable",
]


# The toy model and data: y = x @ W_true^T + b_true + noise, fitted by one Linear layer.
_IN_FEATURES = 16
_OUT_FEATURES = 4
_ROWS_PER_RANK = 32


# ----------------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------------
def _ft_enabled(cfg: ConfigContainer) -> bool:
    # Same test as Megatron Bridge's setup(): a plain dict here (the `+ft.x=...` trap) fails like a real run.
    return bool(cfg.ft and cfg.ft.enable_ft_package)


def _build_optimizer(cfg: ConfigContainer, params) -> torch.optim.Optimizer:
    o = cfg.optimizer
    if o.optimizer == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.sgd_momentum, weight_decay=o.weight_decay)
    if o.optimizer == "adam":
        return torch.optim.Adam(
            params, lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps, weight_decay=o.weight_decay
        )
    raise ValueError(f"reference workload supports optimizer.optimizer in ('sgd', 'adam'), got {o.optimizer!r}")


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------
class _Trainer:
    def __init__(self, cfg: ConfigContainer, state: GlobalState) -> None:
        self.cfg = cfg
        self.state = state
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.save_dir = cfg.checkpoint.save
        seed = cfg.rng.seed
        # Identical initial weights on every rank; a target function shared by all ranks.
        torch.manual_seed(seed)
        self.model = torch.nn.Linear(_IN_FEATURES, _OUT_FEATURES).to(torch_device())  # GPU mode: on the GPU
        target = torch.Generator().manual_seed(seed + 1)
        self.w_true = torch.randn(_OUT_FEATURES, _IN_FEATURES, generator=target)
        self.b_true = torch.randn(_OUT_FEATURES, generator=target)
        self.optimizer = _build_optimizer(cfg, self.model.parameters())
        # Per-rank deterministic data stream; its position is part of the checkpoint.
        self.data_gen = torch.Generator().manual_seed(seed * 1000 + 17 + self.rank)
        # Batches are drawn lazily, one per next(); Megatron Core's RerunDataIterator replays a step's batch
        # when the re-run state machine re-runs the step.
        self.data_iterator = RerunDataIterator(self._batches())
        torch.manual_seed(seed * 1000 + 29 + self.rank)
        self.last_saved_step = -1
        self.local_ckpt = mcore_checkpoint.for_workload(cfg, state)  # NVRx local checkpoints, when asked for

    def _batches(self):
        while True:
            x = torch.randn(_ROWS_PER_RANK, _IN_FEATURES, generator=self.data_gen)
            noise = 0.1 * torch.randn(_ROWS_PER_RANK, _OUT_FEATURES, generator=self.data_gen)
            y = x @ self.w_true.T + self.b_true + noise  # drawn on the CPU: the same data in both modes
            yield x.to(torch_device()), y.to(torch_device())

    # -- checkpointing -------------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        step = self.state.train_state.step
        fault_tolerance.on_checkpointing_start(self.state)
        rng = {"data": self.data_gen.get_state(), "torch": torch.get_rng_state()}
        gathered = [None] * self.world if self.rank == 0 else None
        dist.gather_object(rng, gathered, dst=0)
        if self.rank == 0:
            os.makedirs(self.save_dir, exist_ok=True)
            payload = {
                "format": CKPT_FORMAT,
                "step": step,
                "world_size": self.world,
                "train_state": self.state.train_state.state_dict(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "rng": gathered,
            }
            atomic_torch_save(payload, os.path.join(self.save_dir, f"iter_{step:07d}.pt"))
            # Megatron Bridge writes the bare iteration (no newline) once the save is complete; NVRx's progress
            # tracker reads this file.
            atomic_write_bytes(os.path.join(self.save_dir, TRACKER_FILE), str(step).encode())
        dist.barrier()
        fault_tolerance.on_checkpointing_end(is_async_finalization=False, global_state=self.state)
        self.last_saved_step = step
        if self.rank == 0:
            _log(f"CHECKPOINT saved step={step}")

    def maybe_resume(self) -> None:
        # As Megatron Bridge 0.6.2 does (training/setup.py, _should_load_checkpoint): resume only from
        # checkpoint.load, never from checkpoint.save. A job whose load is unset starts from scratch on every
        # restart, exactly as a real job would; the plugins set load to save where the task shows it.
        load_dir = self.cfg.checkpoint.load
        choice = [newest_checkpoint(load_dir) if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        path = choice[0]
        if self.local_ckpt is not None and mcore_checkpoint.resume_for(self, checkpoint_step(path)):
            return
        if path is None:
            _log("STARTING from scratch")
            return
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        if ckpt.get("format") != CKPT_FORMAT:
            raise RuntimeError(f"{path}: not a reference-workload checkpoint")
        if ckpt["world_size"] != self.world:
            raise RuntimeError(
                f"{path} was written by {ckpt['world_size']} ranks; this run has {self.world} "
                "(bit-exact resume needs the same world size)"
            )
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.state.train_state.load_state_dict(ckpt["train_state"])
        mine = ckpt["rng"][self.rank]
        self.data_gen.set_state(mine["data"])
        torch.set_rng_state(mine["torch"])
        self.last_saved_step = self.state.train_state.step
        fault_tolerance.on_checkpoint_loaded(is_local_chkpt=False, global_state=self.state)
        _log(f"RESUMED from step {self.state.train_state.step} ({os.path.basename(path)})")

    # -- one iteration ---------------------------------------------------------------------------------------
    def train_step(self, injector: FaultInjector) -> tuple[float, tuple[bool, int] | None]:
        """One iteration, shaped like Megatron Bridge's ``train_step``.

        Returns the loss and, when Megatron Core's re-run state machine says the job must stop,
        ``(should_checkpoint, exit_code)`` (the optimizer step is then not taken).
        """
        step = self.state.train_state.step
        injector.maybe_inject(step)
        rsm_cfg = self.cfg.rerun_state_machine
        rerun_state_machine = get_rerun_state_machine()
        loss_value = float("nan")
        with cpu.cuda_calls_on_cpu():
            while rerun_state_machine.should_run_forward_backward(self.data_iterator):
                self.optimizer.zero_grad(set_to_none=False)
                with cpu.cpu_kernel():
                    x, y = next(self.data_iterator)
                    output = self.model(x)
                    if injector.loss_fault(step):
                        # As a fault in the forward pass would: the NaN reaches the loss and the gradients.
                        output = output + float("nan")
                    squared_errors = (output - y).pow(2)
                    # Megatron Bridge's loss function: validates the loss with the re-run state machine.
                    loss_sum, num_elements, _ = masked_next_token_loss(
                        torch.ones_like(squared_errors),
                        squared_errors,
                        check_for_nan_in_loss=rsm_cfg.check_for_nan_in_loss,
                        check_for_spiky_loss=rsm_cfg.check_for_spiky_loss,
                    )
                    loss = loss_sum / num_elements
                    loss.backward()
                    delay = injector.compute_delay(step)
                    spend_compute_time(delay)
                for p in self.model.parameters():  # data-parallel gradient averaging by hand
                    dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                    p.grad.div_(self.world)
                loss_value = float(loss.detach())
            should_checkpoint, should_exit, exit_code = rerun_state_machine.should_checkpoint_and_exit()
        if should_exit:
            return loss_value, (should_checkpoint, exit_code)
        self.optimizer.step()
        return loss_value, None


def pretrain(config: ConfigContainer) -> None:
    """Run the reference training loop with an already-built ``ConfigContainer``.

    Mirrors the order of Megatron Bridge's own ``pretrain``: ``runtime_config_update`` (incl. ``validate()``),
    ``GlobalState`` with the config, process group, re-run state machine (``init_rerun_state``),
    fault-tolerance ``setup`` (+ simulated fault), checkpoint load, NVRx straggler manager set-up, the loop with
    FT step/checkpointing hooks, the re-run state machine's exit decision, the exit-signal check and the
    straggler check, straggler manager and FT ``shutdown``.
    """
    torch.set_num_threads(1)  # determinism and no oversubscription on small CPU hosts
    # Everything imported so far lives as long as the process: frozen, the collector never walks it again, and
    # the interpreter's exit does not either (measured: 4-5 s -> 0.6 s from the last line to the process's end
    # with Megatron Bridge imported; the launcher waits for that on every rank at the end of a job).
    gc.freeze()
    cfg = config
    _log(
        f"START rank={_rank_from_env()} world={os.environ.get('WORLD_SIZE', '1')} "
        f"restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    )
    if _rank_from_env() == 0:
        _log("CONFIG " + json.dumps(config_summary(cfg), sort_keys=True))
    print_spoof_lines()  # NRP_SPOOF_LINES=1: NVRx's verdict lines, printed by a rank (testing/faults.py)

    runtime_config_update(cfg)
    state = GlobalState()
    state.cfg = cfg  # also installs MB's DistributedSignalHandler when train.exit_signal_handler is set
    if inprocess_loop.enabled(cfg):  # Megatron Bridge's wrapper calls _train_once (testing/inprocess_loop.py)
        inprocess_loop.run(cfg, state, _train_once)
        return
    _train_once(cfg, state)


def _train_once(cfg: ConfigContainer, state: GlobalState, restart_store: Any = None) -> None:
    """The training loop of :func:`pretrain`; in-process restart runs it once per restart iteration."""
    created_pg = init_process_group(cfg, restart_store)
    # Megatron Bridge's initialize_megatron calls init_rerun_state once the process groups exist.
    _route_logger("megatron.core.rerun_state_machine", dist.get_rank())
    init_rerun_state(cfg.rerun_state_machine)
    rerun_state_machine = get_rerun_state_machine()
    if not torch.cuda.is_available():
        rerun_state_machine._reduce_any = cpu.reduce_any_on_cpu  # CPU accommodation, see there
    ft_on = _ft_enabled(cfg)
    injector = None
    try:
        if ft_on:
            fault_tolerance.setup(cfg, state)
            with cpu.simulated_fault_device_on_cpu():
                fault_tolerance.maybe_setup_simulated_fault(cfg.ft)

        # Megatron Bridge's setup() lines, at the points it prints them (report's restart phases read them): the
        # seconds since GlobalState was made (after the imports), then the stamped barrier lines around the model's
        # build and the checkpoint's load.
        setup_line(f"time to initialize megatron (seconds): {time.time() - state.start_time:.3f}", barrier=False)
        setup_line("after megatron is initialized")
        trainer = _Trainer(cfg, state)
        setup_line("after model, optimizer, and learning rate scheduler are built")
        injector = FaultInjector(FaultSpec.from_env(), trainer.rank, trainer.world, trainer.save_dir, cfg.checkpoint)
        if trainer.save_dir and trainer.rank == 0:
            os.makedirs(trainer.save_dir, exist_ok=True)
        trainer.maybe_resume()
        # Megatron Bridge's train(): the state machine continues from the loaded iteration.
        if rerun_state_machine.current_iteration != state.train_state.step:
            rerun_state_machine.current_iteration = state.train_state.step
        train_step = _setup_nvrx_straggler(state, trainer)
        setup_line("after dataloaders are built")
        dist.barrier()

        train_iters = cfg.train.train_iters
        save_interval = cfg.checkpoint.save_interval
        exited_on_signal = False
        loop_start = time.monotonic()
        step_seconds: list[float] = []  # iterations without a checkpoint, FT hooks included (STEP_TIMES)
        log_interval = cfg.logger.log_interval
        interval_start, interval_from = time.perf_counter(), state.train_state.step
        while state.train_state.step < train_iters:
            iteration_start = time.perf_counter()
            fault_tolerance.on_training_step_start(state)
            _, rerun_exit = train_step(injector)
            fault_tolerance.on_training_step_end(state)
            if rerun_exit is not None:
                # Megatron Bridge's train(): checkpoint if asked, leave the loop, shut down, sys.exit(exit_code).
                should_checkpoint, exit_code = rerun_exit
                if should_checkpoint and trainer.save_dir:
                    trainer.save_checkpoint()
                _log(f"EXIT rerun_state_machine exit_code={exit_code} step={state.train_state.step}")
                mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state.nvrx_straggler_manager)
                if ft_on:
                    fault_tolerance.shutdown(state)
                sys.exit(exit_code)
            state.train_state.step += 1
            state.train_state.consumed_train_samples += _ROWS_PER_RANK * trainer.world
            # Megatron Bridge's training_log: every log_interval iterations, before the checkpoint decisions, on
            # the last rank, the average time per iteration since the last such line (a save lands in the next).
            if log_interval and state.train_state.step % log_interval == 0:
                now = time.perf_counter()
                if trainer.rank == trainer.world - 1:
                    print(
                        iteration_line(
                            state, train_iters, (now - interval_start) / (state.train_state.step - interval_from)
                        ),
                        flush=True,
                    )
                interval_start, interval_from = now, state.train_state.step

            # Like Megatron Bridge's checkpoint_and_decide_exit: signal first, then the regular interval.
            if cfg.train.exit_signal_handler and any(state.signal_handler.signals_received()):
                if trainer.save_dir:
                    trainer.save_checkpoint()
                barrier_and_log("exiting program after receiving SIGTERM.")  # Megatron Bridge's own line, rank 0
                _log(f"EXIT on signal step={state.train_state.step}")
                exited_on_signal = True
                break
            if trainer.save_dir and save_interval and state.train_state.step % save_interval == 0:
                trainer.save_checkpoint()
            elif trainer.local_ckpt is not None and mcore_checkpoint.local_due(cfg, state.train_state.step):
                mcore_checkpoint.save_local_for(trainer)
            if trainer.last_saved_step != state.train_state.step:
                step_seconds.append(time.perf_counter() - iteration_start)
            # ... and last, NVRx straggler detection (collective: every rank calls it every iteration).
            if _check_nvrx_straggler(state, trainer.rank, time.monotonic() - loop_start):
                if trainer.save_dir and trainer.last_saved_step != state.train_state.step:
                    trainer.save_checkpoint()
                dist.barrier()
                if trainer.rank == 0:
                    _log("Exiting program due to straggler detection.")
                _log(f"EXIT on straggler step={state.train_state.step}")
                exited_on_signal = True
                break

        mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state.nvrx_straggler_manager)
        if not exited_on_signal:
            if trainer.save_dir and trainer.last_saved_step != state.train_state.step:
                trainer.save_checkpoint()
            if trainer.rank == 0:
                if trainer.save_dir:
                    atomic_torch_save(trainer.model.state_dict(), os.path.join(trainer.save_dir, FINAL_PARAMS))
                _log(f"FINISHED step={state.train_state.step} params_sha256={params_sha256(trainer.model)}")
        if trainer.rank == 0 and step_seconds:
            _log(step_times_line(step_seconds))
        if ft_on:
            fault_tolerance.shutdown(state)
        dist.barrier()
    finally:
        if state._signal_handler is not None:
            state._signal_handler.release()
        # NVRx's Detector is process-global: shut it down on every way out, so that a later pretrain() in the
        # same process (in-process restart) can initialise it again. A no-op when it is not running.
        mb_nvrx_straggler.safe_shutdown_nvrx_straggler_manager(state._nvrx_straggler_manager)
        if created_pg and dist.is_initialized():
            dist.destroy_process_group()
        destroy_rerun_state_machine()


def main(argv: list[str] | None = None) -> None:
    """Script entry: Megatron Bridge's override applier on :func:`reference_config`, then :func:`pretrain`."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    overrides = list(sys.argv[1:] if argv is None else argv)
    cfg = reference_config(save_dir=os.environ.get("NRP_SAVE_DIR") or None)
    cfg = process_config_with_overrides(cfg, cli_overrides=overrides or None)
    pretrain(cfg)


if __name__ == "__main__":
    main()
