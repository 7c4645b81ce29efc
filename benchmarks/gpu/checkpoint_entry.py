"""Entry point of the checkpoint GPU proof (issue 20's CUDA-only pieces) on the GPU machine.

``nemo_resiliency_plugins.testing.checkpoint_gpu_proof`` needs CUDA (Megatron Core's async writer, NVRx's
persistent worker and the ``fully_parallel`` exchange call CUDA), so it runs only there, where nemo-run is not
installed: this entry registers the package without its ``__init__`` (as ``workload_entry.py`` does) first.

    torchrun --standalone --nproc-per-node=1 benchmarks/gpu/checkpoint_entry.py /tmp/ckpt_proof 512
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workload_entry  # noqa: E402

if __name__ == "__main__":
    workload_entry._register_package_without_plugins()
    from nemo_resiliency_plugins.testing import checkpoint_gpu_proof

    sys.exit(checkpoint_gpu_proof.main())
