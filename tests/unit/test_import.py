"""Importing the package must not pull in torch, NVRx or Megatron Bridge (only NeMo-Run and fiddle)."""

import subprocess
import sys

CODE = """
import sys
import nemo_run  # NeMo-Run itself may import torch when it is installed; we only measure what we add
before = set(sys.modules)
import nemo_resiliency_plugins
added = sorted(set(sys.modules) - before)
bad = [m for m in added if m.split('.')[0] in ('torch', 'megatron', 'nvidia_resiliency_ext', 'transformer_engine')]
anywhere = [m for m in sys.modules if m.split('.')[0] in ('megatron', 'nvidia_resiliency_ext')]
print('BAD', bad, 'ANYWHERE', anywhere)
"""


def test_import_adds_no_heavy_module():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout
    assert "BAD [] ANYWHERE []" in out, out
