"""testing/mcore_checkpoint.py in this process (a one-rank gloo group): NVRx's real LocalCheckpointManager and Megatron
Core's MCoreTensorAwareStateDict, driven as Megatron Bridge drives them. A corrupt local checkpoint fails loudly
(as in Megatron Bridge 0.6.2: no silent restart from scratch); a lost local directory leaves the choice to the
newest persistent checkpoint; settings whose upstream code needs CUDA are refused on CPU, naming the call."""

from __future__ import annotations

import shutil

import pytest
import torch


@pytest.fixture
def one_rank(tmp_path):
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    if created:
        dist.destroy_process_group()


def ckpt_cfg(tmp_path, **kw):
    from megatron.bridge.training.config import CheckpointConfig

    settings = dict(
        save=str(tmp_path / "ckpt"),
        load=str(tmp_path / "ckpt"),
        save_interval=5,
        non_persistent_ckpt_type="local",
        non_persistent_local_ckpt_dir=str(tmp_path / "local"),
        non_persistent_save_interval=1,
        non_persistent_local_ckpt_algo="atomic",
    )
    return CheckpointConfig(**{**settings, **kw})


def state(step: int, weight: torch.Tensor):
    from nemo_resiliency_plugins.testing.mcore_checkpoint import sharded_state_dict

    return sharded_state_dict({"w": weight}, {"rng": torch.tensor([7, step])}, {"train_state": {"step": step}})


def template():
    from nemo_resiliency_plugins.testing.mcore_checkpoint import sharded_state_dict

    return sharded_state_dict(
        {"w": torch.empty(8, 8)}, {"rng": torch.empty(2, dtype=torch.int64)}, {"train_state": None}
    )


def test_local_save_load_corrupt_and_lost_directory(one_rank, tmp_path):
    from nemo_resiliency_plugins.testing.mcore_checkpoint import Checkpointer, plain

    cfg = ckpt_cfg(tmp_path)
    weight = torch.randn(8, 8)
    saver = Checkpointer(None, cfg)
    for step in (3, 4):
        saver.save_local(step, state(step, weight + step))
    files = sorted(p.name for p in (tmp_path / "local" / "0").iterdir())
    assert files == ["iter_0000004_0_local.pt"], files  # NVRx keeps the newest complete one

    # A restarted process (fresh manager): the local checkpoint is newer than persistent step 0 -> local.
    again = Checkpointer(None, cfg)
    assert again.choose(persistent_step=0) == ("local", 4)
    assert again.choose(persistent_step=5) == ("persistent", 5)  # Megatron Bridge prefers the newer one
    loaded = plain(again.load_local(template()), ("rng",))
    assert torch.equal(loaded["w"], weight + 4) and loaded["rng"].tolist() == [7, 4]
    assert loaded["train_state"] == {"step": 4}

    # Corrupt: the load raises (Megatron Bridge 0.6.2 has no fallback), it never turns into a start from scratch.
    path = tmp_path / "local" / "0" / "iter_0000004_0_local.pt"
    path.write_bytes(path.read_bytes()[:100])
    corrupt = Checkpointer(None, cfg)
    assert corrupt.choose(persistent_step=0) == ("local", 4)
    with pytest.raises(Exception) as info:
        corrupt.load_local(template())
    assert info.type.__name__ in {"UnpicklingError", "RuntimeError", "EOFError", "PicklingError"}, info.type

    # The node's directory is gone: nothing local is found, the newest persistent checkpoint decides.
    shutil.rmtree(tmp_path / "local")
    gone = Checkpointer(None, cfg)
    assert gone.newest_local() == -1
    assert gone.choose(persistent_step=10) == ("persistent", 10)
    assert gone.choose(persistent_step=-1) is None


@pytest.mark.parametrize(
    ("kw", "where"),
    [
        ({"non_persistent_local_ckpt_algo": "fully_parallel"}, "exchange_loaded_tensors_broadcast"),
        ({"replication": True, "replication_jump": 1}, "send_state_dict"),
        ({"async_save": True}, "rank % torch.cuda.device_count()"),
    ],
)
def test_settings_whose_upstream_code_needs_cuda_are_refused_on_cpu_naming_the_call(kw, where, tmp_path):
    from types import SimpleNamespace

    from nemo_resiliency_plugins.testing.mcore_checkpoint import for_workload

    assert not torch.cuda.is_available()
    cfg = SimpleNamespace(checkpoint=ckpt_cfg(tmp_path, **kw))
    with pytest.raises(RuntimeError, match="needs CUDA") as info:
        for_workload(cfg, None)
    assert where in str(info.value)
