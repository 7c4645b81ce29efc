"""The reference workload's Megatron Bridge configuration: the smallest real ``ConfigContainer`` that passes
Megatron Bridge's own validation on CPU, as an object (script path) or a fiddle tree (``run.Partial`` path).

Importing this module makes Megatron Bridge importable without Transformer Engine first
(:mod:`~nemo_resiliency_plugins.testing.te_compat`); :func:`no_env_vars` relies on that.
"""

from __future__ import annotations

import gc
from typing import Any

from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

# Importing Megatron Bridge creates millions of objects; the cyclic collector adds ~10% to the import while
# they appear (see the same block in workload.py). Off during the imports below, on again after them.
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()
ensure_megatron_bridge_importable()

from megatron.bridge.models.gpt_provider import GPTModelProvider  # noqa: E402
from megatron.bridge.training.config import (  # noqa: E402
    CheckpointConfig,
    ConfigContainer,
    LoggerConfig,
    MockGPTDatasetConfig,
    OptimizerConfig,
    RNGConfig,
    SchedulerConfig,
    TrainingConfig,
)
from megatron.bridge.training.tokenizers.config import TokenizerConfig  # noqa: E402

if _GC_WAS_ENABLED:
    gc.enable()

__all__ = ["no_env_vars", "reference_config", "reference_config_buildable"]


def _reference_kwargs(save_dir: str | None) -> dict[str, dict[str, Any]]:
    """Constructor arguments of every sub-config the ConfigContainer constructor requires.

    ``ConfigContainer`` has no defaults for ``train``, ``model``, ``optimizer``, ``scheduler``, ``dataset``,
    ``logger``, ``tokenizer`` and ``checkpoint``; everything else (``rng``, ``ddp``, ``dist``, ...) has one.
    The values are the smallest that pass Megatron Bridge's own ``ConfigContainer.validate()`` on CPU for any
    world size: a 1-layer GPT provider (never instantiated; the workload trains a Linear), a mock dataset
    (never built), a NullTokenizer, constant LR. ``ft``, ``straggler``, ``nvrx_straggler`` and
    ``inprocess_restart`` are left at their default ``None``: the plugins set them.
    """
    return {
        "train": dict(train_iters=20, global_batch_size=8, micro_batch_size=1),
        "model": dict(
            num_layers=1,
            hidden_size=16,
            num_attention_heads=1,
            vocab_size=32,
            seq_length=8,
            make_vocab_size_divisible_by=8,
        ),
        # SGD with momentum, so that resume correctness depends on the optimizer state too.
        "optimizer": dict(
            optimizer="sgd", lr=0.05, sgd_momentum=0.9, weight_decay=0.0, use_distributed_optimizer=False
        ),
        "scheduler": dict(lr_decay_style="constant"),
        # GPTDatasetConfig.finalize() requires these three to be set explicitly.
        "dataset": dict(
            seq_length=8,
            random_seed=1234,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
        ),
        "logger": dict(log_interval=1),
        "tokenizer": dict(tokenizer_type="NullTokenizer", vocab_size=32),
        # As Megatron Bridge's recipes do (recipes/common.py): load and save name the same directory.
        "checkpoint": dict(save=save_dir, load=save_dir, save_interval=5),
        "rng": dict(seed=1234),
    }


_CLASSES = {
    "train": TrainingConfig,
    "model": GPTModelProvider,
    "optimizer": OptimizerConfig,
    "scheduler": SchedulerConfig,
    "dataset": MockGPTDatasetConfig,
    "logger": LoggerConfig,
    "tokenizer": TokenizerConfig,
    "checkpoint": CheckpointConfig,
    "rng": RNGConfig,
}


def reference_config(save_dir: str | None = None) -> ConfigContainer:
    """A tiny, valid Megatron Bridge ``ConfigContainer`` for the reference workload.

    Fields the workload uses: ``train.train_iters``, ``train.exit_signal_handler``/``exit_signal``,
    ``checkpoint.save``/``load``/``save_interval``, ``optimizer.lr``/``sgd_momentum``/``weight_decay``
    (``optimizer.optimizer`` "sgd" or "adam" with ``adam_beta1/2``, ``adam_eps``), ``rng.seed``,
    ``dist.distributed_timeout_minutes``, and ``ft`` (Megatron Bridge's fault-tolerance hooks).
    """
    kwargs = _reference_kwargs(save_dir)
    return ConfigContainer(**{name: _CLASSES[name](**kw) for name, kw in kwargs.items()})


def reference_config_buildable(save_dir: str | None = None):
    """The same configuration as a NeMo-Run ``run.Config(ConfigContainer, ...)`` tree.

    Every sub-config is itself a ``run.Config`` of the real Megatron Bridge class, with only primitive
    arguments, so the tree survives NeMo-Run's ``ZlibJSONSerializer`` round trip (``Experiment.add``
    validation) and ``fdl.build`` gives a real ``ConfigContainer``. ``ft``, ``straggler``, ``nvrx_straggler``
    and ``inprocess_restart`` are not set (``None`` when built), for the plugins to fill in.
    """
    import nemo_run as run

    kwargs = _reference_kwargs(save_dir)
    return run.Config(
        ConfigContainer,
        env_vars=run.Config(no_env_vars),
        **{name: run.Config(_CLASSES[name], **kw) for name, kw in kwargs.items()},
    )


def no_env_vars() -> dict[str, str]:
    """Builds ``ConfigContainer.env_vars`` in :func:`reference_config_buildable`: always ``{}``.

    Why it exists (the smallest route found; CPU/test accommodation): NeMo-Run's ``fdl_runner`` deserializes
    the task in a fresh process, and fiddle imports every class the tree names while deserializing - before
    anything of ours has run. The first ``megatron.bridge`` class it imports would fail without Transformer
    Engine (see :mod:`~nemo_resiliency_plugins.testing.te_compat`). fiddle deserializes a Config's arguments
    in signature order, and ``env_vars`` is ``ConfigContainer``'s first field, so this reference to *this*
    module is resolved first; importing this module installs the accommodation, and the Megatron Bridge
    classes that follow import normally. Replacing ``env_vars`` with a plain dict removes that guarantee
    (only on machines without Transformer Engine).
    """
    return {}
