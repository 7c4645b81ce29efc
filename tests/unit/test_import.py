"""What importing the package costs: NeMo-Run and fiddle for the plugins, nothing heavy for the ranks."""

import subprocess
import sys

import nemo_resiliency_plugins

CODE = """
import sys
import nemo_run  # NeMo-Run itself may import torch when it is installed; we only measure what we add
before = set(sys.modules)
from nemo_resiliency_plugins import *  # every public name, so every plugin module
added = sorted(set(sys.modules) - before)
bad = [m for m in added if m.split('.')[0] in ('torch', 'megatron', 'nvidia_resiliency_ext', 'transformer_engine')]
anywhere = [m for m in sys.modules if m.split('.')[0] in ('megatron', 'nvidia_resiliency_ext')]
print('BAD', bad, 'ANYWHERE', anywhere, 'PLUGINS', 'nemo_resiliency_plugins.inprocess_restart' in added)
"""

RANK_CODE = """
import sys
import nemo_resiliency_plugins.testing.te_compat  # what the reference workload imports first, in every rank
print('NEMO_RUN', 'nemo_run' in sys.modules, 'FIDDLE', 'fiddle' in sys.modules)
"""


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_importing_every_plugin_adds_no_heavy_module():
    assert "BAD [] ANYWHERE [] PLUGINS True" in _run(CODE)


def test_a_training_rank_importing_the_test_helpers_does_not_import_nemo_run():
    # Several seconds per rank start (measured: ~3.4 s on the development machine) for nothing the rank uses.
    assert "NEMO_RUN False FIDDLE False" in _run(RANK_CODE)


def test_every_public_name_resolves_to_its_class():
    for name in nemo_resiliency_plugins.__all__:
        value = getattr(nemo_resiliency_plugins, name)
        assert value.__name__ == name
        assert name in dir(nemo_resiliency_plugins)


def test_an_unknown_name_is_an_attribute_error():
    try:
        nemo_resiliency_plugins.FaultTolerancePlugn  # noqa: B018
    except AttributeError as e:
        assert "FaultTolerancePlugn" in str(e)
    else:
        raise AssertionError("expected AttributeError")


def test_all_and_the_lazy_table_name_the_same_things():
    assert sorted(nemo_resiliency_plugins.__all__) == sorted(nemo_resiliency_plugins._EXPORTS)
