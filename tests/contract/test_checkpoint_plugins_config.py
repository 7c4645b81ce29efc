"""AsyncCheckpointPlugin and LocalCheckpointPlugin against Megatron Bridge's, Megatron Core's and NVRx's real code:
field parity with ``CheckpointConfig``, every key and type through Megatron Bridge's own override parser, the
Partial path built with fiddle, ``finalize()``/``validate()`` accepting what the plugins write and rejecting what
they refuse, and NVRx's local checkpoint manager built by Megatron Bridge from the result."""

from __future__ import annotations

import dataclasses
import sys

import fiddle as fdl
import nemo_run as run
import pytest

from nemo_resiliency_plugins import AsyncCheckpointPlugin, LocalCheckpointPlugin, ResiliencyConfigError
from nemo_resiliency_plugins import async_checkpoint as async_module
from nemo_resiliency_plugins import local_checkpoint as local_module

pytestmark = pytest.mark.contract

LOCAL_DIR = "/tmp/nrp-local-ckpt"
ASYNC_CASES = [
    AsyncCheckpointPlugin(),
    AsyncCheckpointPlugin(
        async_strategy="mcore",
        async_ckpt_cpu_priority=19,
        async_ckpt_io_priority=None,
        async_write_results_mp_mode="spawn",
        dist_ckpt_workers=2,
    ),
    AsyncCheckpointPlugin(async_ckpt_io_priority=0, async_ckpt_cpu_priority=0, ckpt_assume_constant_structure=True),
]
LOCAL_CASES = [
    LocalCheckpointPlugin(non_persistent_local_ckpt_dir=LOCAL_DIR, non_persistent_save_interval=2),
    LocalCheckpointPlugin(
        non_persistent_local_ckpt_dir=LOCAL_DIR,
        non_persistent_save_interval=3,
        non_persistent_local_ckpt_algo="atomic",
        replication=True,
        replication_jump=1,
        replication_factor=2,
    ),
]

IDS = ["async", "async-mcore", "async-prio0", "local", "repl"]


def local(**kw):
    return run.LocalExecutor(ntasks_per_node=2, **kw)


def slurm(nodes: int, per_node: int):
    return run.SlurmExecutor(account="a", nodes=nodes, ntasks_per_node=per_node, tunnel=run.LocalTunnel(job_dir="/tmp"))


def schedule(tmp_path) -> list[str]:
    d = tmp_path / "ckpt"
    return [f"checkpoint.save={d}", f"checkpoint.load={d}", "checkpoint.save_interval=10"]


def mb_defaults(cls) -> dict:
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }


def assert_same_values_and_types(obj, expected: dict) -> None:
    for name, value in expected.items():
        got = getattr(obj, name)
        assert got == value, f"{name}: {got!r} != {value!r}"
        assert type(got) is type(value), f"{name}: {type(got).__name__} vs {type(value).__name__}"


# ------------------------------------------------------------------------------------------ field parity


@pytest.mark.parametrize("plugin_cls", [AsyncCheckpointPlugin, LocalCheckpointPlugin])
def test_every_plugin_field_is_a_checkpoint_config_field_with_its_default(plugin_cls, megatron_bridge):
    defaults = mb_defaults(megatron_bridge.CheckpointConfig)
    inherited = {f.name for f in dataclasses.fields(run.Plugin)}
    own = getattr(sys.modules[plugin_cls.__module__], "OWN_FIELDS", ())
    for f in dataclasses.fields(plugin_cls):
        if f.name == "script_args_converter_fn" or f.name in inherited:
            continue
        if f.name in own:  # strictly more than Megatron Bridge: a name of ours that must not shadow one of its
            assert f.name not in defaults, f"{f.name} is a CheckpointConfig field now"
            continue
        assert f.name in defaults, f"CheckpointConfig has no field {f.name}"
        assert f.default == defaults[f.name], f"{f.name}: plugin {f.default!r}, Megatron Bridge {defaults[f.name]!r}"


def test_choices_match_megatron_cores_literals(megatron_bridge):
    import typing

    from megatron.training.config import CheckpointConfig as CoreCheckpointConfig

    hints = typing.get_type_hints(CoreCheckpointConfig)
    assert typing.get_args(hints["async_strategy"]) == async_module.ASYNC_STRATEGIES
    assert typing.get_args(hints["non_persistent_local_ckpt_algo"]) == local_module.LOCAL_ALGOS
    assert set(async_module.ASYNC_FORMATS) < set(typing.get_args(hints["ckpt_format"]))
    assert "local" in typing.get_args(typing.get_args(hints["non_persistent_ckpt_type"])[0]) or "local" in str(
        hints["non_persistent_ckpt_type"]
    )
    fields = set(async_module.CONFIG_FIELDS) | set(local_module.CONFIG_FIELDS)
    assert fields <= set(mb_defaults(megatron_bridge.CheckpointConfig))


# ------------------------------------------------------------------------------------- run.Script overrides


@pytest.mark.parametrize("plugin", ASYNC_CASES + LOCAL_CASES, ids=IDS)
def test_script_overrides_give_a_checkpoint_config_that_megatron_bridge_accepts(
    plugin, megatron_bridge, apply_overrides, workload, tmp_path
):
    task = run.Script(path="/tmp/train.py", entrypoint="python", args=schedule(tmp_path))
    plugin.setup(task, slurm(2, 1) if getattr(plugin, "replication", False) else local())
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), task.args)
    assert type(cfg.checkpoint) is megatron_bridge.CheckpointConfig
    assert_same_values_and_types(cfg.checkpoint, plugin.config_values())
    cfg.checkpoint.finalize()
    cfg.validate()


def test_both_plugins_together_and_the_nvrx_local_manager_megatron_bridge_builds(
    megatron_bridge, apply_overrides, workload, tmp_path
):
    # Megatron Bridge's checkpointing.py imports nvidia-modelopt unconditionally (not installed here), so the
    # manager is built by testing/mcore_checkpoint.py with the same NVRx calls as its init_checkpointing_context.
    from nvidia_resiliency_ext.checkpointing.local.ckpt_managers.local_manager import LocalCheckpointManager

    from nemo_resiliency_plugins.testing.mcore_checkpoint import local_checkpoint_manager

    task = run.Script(path="/tmp/train.py", entrypoint="python", args=schedule(tmp_path))
    AsyncCheckpointPlugin().setup(task, local())
    LocalCheckpointPlugin(non_persistent_local_ckpt_dir=str(tmp_path / "local"), non_persistent_save_interval=2).setup(
        task, local()
    )
    cfg = apply_overrides(workload.reference_config(str(tmp_path)), task.args)
    cfg.validate()
    assert cfg.checkpoint.async_save is True and cfg.checkpoint.async_strategy == "nvrx"
    manager = local_checkpoint_manager(cfg.checkpoint)
    assert isinstance(manager, LocalCheckpointManager) and manager.repl_strategy is None
    assert str(manager.root_local_ckpt_dir) == str(tmp_path / "local")


# --------------------------------------------------------------------------------- run.Partial with fiddle


@pytest.mark.parametrize("plugin", ASYNC_CASES + LOCAL_CASES, ids=IDS)
def test_partial_builds_the_same_checkpoint_config(plugin, megatron_bridge, workload, tmp_path):
    executor = slurm(2, 1) if getattr(plugin, "replication", False) else local()
    buildable = workload.reference_config_buildable(str(tmp_path))
    buildable.checkpoint.load = str(tmp_path)
    buildable.checkpoint.save_interval = 10
    task = run.Partial(workload.pretrain, config=buildable)
    plugin.setup(task, executor)
    cfg = fdl.build(task).keywords["config"]
    assert_same_values_and_types(cfg.checkpoint, plugin.config_values())
    cfg.validate()


# ------------------------------------------------------- what the plugins refuse, Megatron Bridge rejects too


def test_async_refusals_are_megatron_bridges_own_rejections(megatron_bridge, apply_overrides, workload, tmp_path):
    cc = megatron_bridge.CheckpointConfig
    with pytest.raises(ResiliencyConfigError, match="use_persistent_ckpt_worker"):
        AsyncCheckpointPlugin(use_persistent_ckpt_worker=False)
    with pytest.raises(AssertionError, match="use_persistent_ckpt_worker"):
        cc(save=str(tmp_path), async_save=True, use_persistent_ckpt_worker=False).finalize()

    with pytest.raises(ResiliencyConfigError, match="checkpoint.save"):
        # shown as null (one not shown only warns: the job's YAML may set it, docs/dropin.md)
        AsyncCheckpointPlugin().setup(
            run.Script(path="/tmp/t.py", entrypoint="python", args=["checkpoint.save=null"]), local()
        )
    with pytest.raises(AssertionError, match="save is not set"):
        cc(async_save=True).finalize()

    for fmt in ("torch", "torch_dcp"):
        with pytest.raises(ResiliencyConfigError, match="ckpt_format"):
            AsyncCheckpointPlugin(ckpt_format=fmt)
        args = [*schedule(tmp_path), f"checkpoint.ckpt_format={fmt}"]
        with pytest.raises(ResiliencyConfigError, match=f"checkpoint.ckpt_format='{fmt}'") as info:
            AsyncCheckpointPlugin().setup(run.Script(path="/tmp/t.py", entrypoint="python", args=args), local())
        assert "AsyncCheckpointPlugin.ckpt_format" in str(info.value)  # both settings named
        cfg = apply_overrides(workload.reference_config(str(tmp_path)), [*args, "checkpoint.async_save=true"])
        with pytest.raises(AssertionError, match="async_save is only supported"):
            cfg.validate()


def test_local_refusals_are_what_megatron_bridge_or_nvrx_reject(megatron_bridge, tmp_path):
    from nvidia_resiliency_ext.checkpointing.local.replication.group_utils import parse_group_sequence

    # Replication without a jump: Megatron Bridge hands None to NVRx, which cannot compare it.
    with pytest.raises(ResiliencyConfigError, match="replication_jump"):
        LocalCheckpointPlugin(non_persistent_local_ckpt_dir=LOCAL_DIR, non_persistent_save_interval=2, replication=True)
    with pytest.raises(TypeError):
        parse_group_sequence(replication_jump=None, replication_factor=2, world_size=4)
    # A world size that NVRx cannot split into cliques (3 ranks per node, J=3, F=2 on 3 nodes: 9 % 6).
    plugin = LocalCheckpointPlugin(
        non_persistent_local_ckpt_dir=LOCAL_DIR,
        non_persistent_save_interval=2,
        replication=True,
        replication_jump=3,
        replication_factor=2,
    )
    with pytest.raises(ResiliencyConfigError, match="divisible"):
        plugin.setup(run.Script(path="/tmp/t.py", entrypoint="python"), slurm(3, 3))
    with pytest.raises(AssertionError, match="Cannot split"):
        parse_group_sequence(replication_jump=3, replication_factor=2, world_size=9)
    # HF export with local checkpoints.
    task = run.Script(
        path="/tmp/t.py",
        entrypoint="python",
        args=[*schedule(tmp_path), "checkpoint.also_save_hf_checkpoint=true"],
    )
    with pytest.raises(ResiliencyConfigError, match="also_save_hf_checkpoint"):
        LocalCheckpointPlugin(non_persistent_local_ckpt_dir=LOCAL_DIR, non_persistent_save_interval=2).setup(
            task, local()
        )
    with pytest.raises(ValueError, match="not compatible with local"):
        megatron_bridge.CheckpointConfig(
            save=str(tmp_path), also_save_hf_checkpoint=True, non_persistent_ckpt_type="local"
        ).finalize()


def test_megatron_bridge_writes_local_checkpoints_only_with_checkpoint_save():
    """The plugin's checkpoint.save rule rests on this line of train.py (every save is gated on it).

    Read as text: train.py imports nvidia-modelopt, which this CPU environment does not have."""
    from pathlib import Path

    import megatron.bridge

    text = (Path(megatron.bridge.__file__).parent / "training" / "train.py").read_text()
    source = text.split("def checkpoint_and_decide_exit(")[1].split("\ndef ")[0]
    assert "state.cfg.checkpoint.save\n        and state.cfg.checkpoint.non_persistent_save_interval" in source
    # and the signal exit path saves with the default non_persistent_ckpt=False (a persistent checkpoint)
    exit_block = source.split("# Exit based on signal handler.")[1].split("# Regular save")[0]
    assert "save_checkpoint_and_time(" in exit_block and "non_persistent_ckpt" not in exit_block


def test_megatron_bridge_never_passes_async_ckpt_use_cpu_shm_which_the_plugin_refuses(megatron_bridge):
    """Megatron Bridge 0.6.2 reads async_ckpt_use_cpu_shm nowhere (Megatron-LM's own loop does)."""
    from pathlib import Path

    import megatron.bridge

    root = Path(megatron.bridge.__file__).parent
    assert not [p for p in root.rglob("*.py") if "cpu_shm" in p.read_text(errors="ignore")]
    with pytest.raises(ResiliencyConfigError, match="async_ckpt_use_cpu_shm"):
        AsyncCheckpointPlugin(async_ckpt_use_cpu_shm=True)


def test_the_workloads_local_vs_persistent_choice_is_megatron_bridges():
    """testing/mcore_checkpoint.Checkpointer.choose mirrors these lines of checkpointing.py (read as text: the module
    imports nvidia-modelopt, not installed here): a local checkpoint wins when at least as new as the persistent one,
    and the local manager is built from exactly these config fields."""
    from pathlib import Path

    import megatron.bridge

    text = (Path(megatron.bridge.__file__).parent / "training" / "checkpointing.py").read_text()
    assert "if non_persistent_iteration >= iteration:" in text
    assert 'checkpointing_context["local_checkpoint_manager"].find_latest()' in text
    context = text.split("def init_checkpointing_context(")[1].split("\ndef ")[0]
    assert "CliqueReplicationStrategy.from_replication_params(" in context
    assert "checkpoint_config.replication_jump,\n            checkpoint_config.replication_factor," in context
    assert "LocalCheckpointManager(\n            checkpoint_config.non_persistent_local_ckpt_dir," in context
