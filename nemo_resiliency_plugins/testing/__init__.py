"""Test-support code for nemo-resiliency-plugins.

Nothing here is imported by the plugins themselves. The package holds:

* :mod:`nemo_resiliency_plugins.testing.te_compat` - a narrow accommodation that lets Megatron Bridge's
  config module import on machines without Transformer Engine (CPU-only CI).
* :mod:`nemo_resiliency_plugins.testing.workload` - the reference workload: a small, deterministic
  CPU/gloo training loop driven by Megatron Bridge's real ``ConfigContainer`` and its real
  fault-tolerance hooks, used to prove the plugins end to end.

Submodules are imported lazily (importing this package has no side effects).
"""
