"""The reference workload's GPU mode (NRP_DEVICE=cuda): its pure-Python parts, on a CPU machine.

The GPU run itself is benchmarks/gpu/gpu_proof.sh (CI has no GPU); these tests pin the selection logic it
relies on: the device from NRP_DEVICE, NCCL for cuda and gloo for cpu, the GPU index from LOCAL_RANK, and
that the default mode is unchanged (CPU tensors, a sleep for the step's extra compute time).
"""

from __future__ import annotations

import time

import pytest
import torch

from nemo_resiliency_plugins.testing import devices as workload  # the GPU mode lives in testing/devices.py


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, "cpu"), ({"NRP_DEVICE": ""}, "cpu"), ({"NRP_DEVICE": "cpu"}, "cpu"), ({"NRP_DEVICE": " CUDA "}, "cuda")],
)
def test_device_from_env(env, expected):
    assert workload.device_from_env(env) == expected


@pytest.mark.parametrize("value", ["gpu", "cuda:0", "nccl", "mps"])
def test_device_from_env_rejects_other_values_naming_the_variable(value):
    with pytest.raises(ValueError, match="NRP_DEVICE") as info:
        workload.device_from_env({"NRP_DEVICE": value})
    assert "cpu, cuda" in str(info.value)


def test_backend_for_each_device():
    assert workload.backend_for("cuda") == "nccl"
    assert workload.backend_for("cpu") == "gloo"
    with pytest.raises(ValueError, match="'tpu'"):
        workload.backend_for("tpu")


def test_cuda_device_index_is_the_local_rank():
    assert workload.cuda_device_index({}) == 0
    assert workload.cuda_device_index({"LOCAL_RANK": "3"}) == 3


def test_default_mode_stays_on_the_cpu(monkeypatch):
    monkeypatch.delenv("NRP_DEVICE", raising=False)
    assert workload.torch_device() == torch.device("cpu")
    start = time.perf_counter()
    workload.spend_compute_time(0.05)
    assert time.perf_counter() - start >= 0.045
    workload.spend_compute_time(0.0)  # nothing to spend, no CUDA touched


def test_gpu_mode_device_follows_local_rank(monkeypatch):
    monkeypatch.setenv("NRP_DEVICE", "cuda")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert workload.torch_device() == torch.device("cuda", 1)  # a device object only: no CUDA call is made
