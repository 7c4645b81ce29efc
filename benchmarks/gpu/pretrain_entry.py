"""Megatron Bridge's real training loop on one GPU: the training script of the real-pretrain proof.

A user's script, as small as it can be: a tiny GPT (``GPTModelProvider`` with Megatron Bridge's
``local_layer_spec``, so no Transformer Engine), ``MockGPTDatasetConfig`` and a null tokenizer (no data files),
a ``ConfigContainer`` with checkpointing, then the command-line Hydra overrides applied by Megatron Bridge's own
``process_config_with_overrides`` (the overrides the plugins' ``setup()`` wrote into ``task.args``), then
``megatron.bridge.training.pretrain.pretrain`` with ``megatron.bridge.training.gpt_step.forward_step``.
Nothing of Megatron Bridge's loop is replaced: checkpointing, resume, the FT hooks, the signal handler, the
re-run state machine, the NVRx straggler manager and the in-process restart wrapper are all its own.

What this script adds around it:

* ``checkpoint.load`` is the save directory: Megatron Bridge 0.6.2 resumes only from ``checkpoint.load``
  (``training/setup.py:_should_load_checkpoint``), so a job that should survive a restart must set it; a user's
  script does the same. ``PRETRAIN_NO_LOAD=1`` leaves it unset (to show what happens then).
* Faults come from the reference workload's injector (``NRP_FAULT``, ``NRP_FAULT_STEP``, ``NRP_FAULT_RANK``:
  ``kill``, ``hang``, ``raise``, ``sigterm`` once per save directory; ``slow``), called at the start of the
  forward step, i.e. inside Megatron Bridge's ``step`` FT section. ``NRP_STEP_TIME`` seconds of each step are
  spent in a GPU kernel (``torch.cuda._sleep``), and ``slow`` makes that kernel 3x longer, so CUPTI (NVRx's
  straggler detector) sees a slow kernel.
* A Megatron Bridge callback (its public ``Callback`` API) prints ``LOSS step=<n> lm_loss=<v>`` after every step
  (``n`` = steps completed before it: Megatron Bridge fires ``on_train_step_end`` before it counts the step),
  ``TRAIN_START pid=<pid> step=<n>`` when the loop starts (twice in one pid = an in-process restart) and
  ``FINISHED step=<n> params_sha256=<hex>`` at ``on_train_end``; ``START pid=`` lines make restarts visible.

Run (on the GPU machine; the packages carried by ``pack_site.py`` on ``PYTHONPATH``)::

    torchrun --standalone --nproc-per-node=1 benchmarks/gpu/pretrain_entry.py checkpoint.save=/tmp/ck \
        train.train_iters=60 [plugin overrides ...]
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import workload_entry  # noqa: E402

# The GPU machine has no nemo-run: register the package without its __init__ (which imports the plugins).
workload_entry._register_package_without_plugins()

from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable  # noqa: E402

ensure_megatron_bridge_importable()  # no Transformer Engine there either: one LoRA import is unguarded

import torch  # noqa: E402
from megatron.bridge.models.gpt_provider import GPTModelProvider, local_layer_spec  # noqa: E402
from megatron.bridge.training.callbacks import Callback  # noqa: E402
from megatron.bridge.training.config import (  # noqa: E402
    CheckpointConfig,
    ConfigContainer,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TrainingConfig,
    ValidationConfig,
)
from megatron.bridge.training.gpt_step import forward_step as mb_forward_step  # noqa: E402
from megatron.bridge.training.pretrain import pretrain  # noqa: E402
from megatron.bridge.training.state import GlobalState  # noqa: E402
from megatron.bridge.training.tokenizers.config import TokenizerConfig  # noqa: E402
from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides  # noqa: E402

from nemo_resiliency_plugins.testing.devices import spend_compute_time  # noqa: E402
from nemo_resiliency_plugins.testing.faults import FaultInjector, FaultSpec  # noqa: E402

SEQ = 128
VOCAB = 1024


def _log(msg: str) -> None:
    print(f"[rank{os.environ.get('RANK', '0')}] {msg}", flush=True)


def build_config(save_dir: str | None) -> ConfigContainer:
    """The user's ConfigContainer: a 2-layer GPT, hidden 128, sequence 128, fp32, no dropout (so that a resumed
    run can be compared with the fault-free one), mock data, null tokenizer, a checkpoint every 10 steps."""
    model = GPTModelProvider(
        transformer_layer_spec=local_layer_spec,
        num_layers=2,
        hidden_size=128,
        ffn_hidden_size=512,
        num_attention_heads=4,
        seq_length=SEQ,
        vocab_size=VOCAB,
        make_vocab_size_divisible_by=128,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        masked_softmax_fusion=False,  # no Apex / Transformer Engine kernels there
        cross_entropy_loss_fusion=False,
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=1,
    )
    load = None if os.environ.get("PRETRAIN_NO_LOAD") == "1" else save_dir
    return ConfigContainer(
        train=TrainingConfig(train_iters=60, global_batch_size=8, micro_batch_size=8),
        validation=ValidationConfig(eval_iters=0, eval_interval=None),
        model=model,
        optimizer=OptimizerConfig(
            optimizer="adam", lr=3e-4, min_lr=3e-5, weight_decay=0.01, use_distributed_optimizer=False, bf16=False
        ),
        scheduler=SchedulerConfig(
            lr_decay_style="constant",
            lr_warmup_iters=0,
            start_weight_decay=0.01,
            end_weight_decay=0.01,
            weight_decay_incr_style="constant",
        ),
        dataset=MockGPTDatasetConfig(
            seq_length=SEQ,
            random_seed=1234,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            num_dataset_builder_threads=1,
            dataloader_type="single",
            num_workers=1,
        ),
        logger=LoggerConfig(log_interval=10),
        tokenizer=TokenizerConfig(tokenizer_type="NullTokenizer", vocab_size=VOCAB),
        checkpoint=CheckpointConfig(save=save_dir, load=load, save_interval=10, ckpt_format="torch_dist"),
        rng=RNGConfig(seed=1234),
    )


class ProofCallback(Callback):
    """Prints the loss of every step and, at the end, a hash of the trained parameters."""

    def on_train_start(self, context) -> None:
        _log(f"TRAIN_START pid={os.getpid()} step={context.state.train_state.step} time={time.time():.3f}")

    def on_train_step_end(self, context) -> None:
        try:
            loss = context.loss_dict.get("lm loss") if context.loss_dict else None
            value = float(loss.item() if hasattr(loss, "item") else loss) if loss is not None else float("nan")
        except Exception as e:  # a proof line must never break the run it observes
            _log(f"LOSS_UNREADABLE {type(e).__name__}: {e}")
            value = float("nan")
        _log(f"LOSS step={context.state.train_state.step} lm_loss={value:.6f}")

    def on_train_end(self, context) -> None:
        h = hashlib.sha256()
        for chunk in context.model:
            for name, tensor in chunk.state_dict().items():
                if isinstance(tensor, torch.Tensor):
                    h.update(name.encode())
                    h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
        _log(f"FINISHED step={context.state.train_state.step} params_sha256={h.hexdigest()}")


_injector: list[FaultInjector] = []


def forward_step(state: GlobalState, data_iterator, model, return_schedule_plan: bool = False):
    """Megatron Bridge's ``gpt_step.forward_step``, after the fault injector and the step's GPU kernel."""
    if not _injector:
        save = state.cfg.checkpoint.save
        _injector.append(FaultInjector(FaultSpec.from_env(), int(os.environ.get("RANK", "0")), 1, save))
    step = state.train_state.step
    _injector[0].maybe_inject(step)
    spend_compute_time(_injector[0].compute_delay(step))
    return mb_forward_step(state, data_iterator, model, return_schedule_plan)


def main(argv: list[str]) -> None:
    save_dir = os.environ.get("NRP_SAVE_DIR")
    cfg = build_config(save_dir)
    cfg = process_config_with_overrides(cfg, cli_overrides=argv or None)
    if cfg.checkpoint.load is None and cfg.checkpoint.save and os.environ.get("PRETRAIN_NO_LOAD") != "1":
        cfg.checkpoint.load = cfg.checkpoint.save  # resume from where this job saves (see the docstring)
    _log(
        f"START pid={os.getpid()} restart={os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')} time={time.time():.3f}"
        f" save={cfg.checkpoint.save} load={cfg.checkpoint.load} ft={type(cfg.ft).__name__}"
        f" nvrx_straggler={type(cfg.nvrx_straggler).__name__} inprocess_restart={type(cfg.inprocess_restart).__name__}"
        f" exit_signal_handler={cfg.train.exit_signal_handler} rerun_mode={cfg.rerun_state_machine.rerun_mode}"
    )
    pretrain(cfg, forward_step, callbacks=[ProofCallback()])
    _log(f"PRETRAIN_RETURNED pid={os.getpid()}")


if __name__ == "__main__":
    main(sys.argv[1:])
