"""FaultTolerancePlugin(nvrx_config=...): more of NVRx's own config keys (node checks before a rendezvous, storage
checks, segments) for ft_launcher's config file, checked against the installed NVRx's ``FaultToleranceConfig``.

NVRx reads the file with ``ignore_not_recognized=True``: a misspelt key would be dropped without a word, so the
plugin refuses it. The file the plugin writes is read back by real NVRx with ``ignore_not_recognized=False``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core import nvrx_launcher
from tests.helpers import TRAIN, add_job, local


def _nvrx_fields() -> set[str]:
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig

    return {f.name for f in dataclasses.fields(FaultToleranceConfig) if f.init}


def test_the_keys_are_the_installed_nvrx_class_fields_and_the_pinned_ones_are_0_7_0s():
    keys, source = nvrx_launcher.config_keys()
    assert keys == _nvrx_fields() and "config.py" in source, source
    assert nvrx_launcher.TESTED_CONFIG_KEYS == _nvrx_fields()  # NVRx 0.7.0 is what CI installs
    assert set(nvrx_launcher.OWNED_CONFIG_KEYS) <= keys


def test_extra_keys_reach_the_file_nvrx_reads():
    import nemo_run as run
    from nvidia_resiliency_ext.fault_tolerance.config import FaultToleranceConfig

    extra = {
        "enable_nic_healthcheck": False,
        "enable_dist_storage_healthcheck": True,
        "storage_healthcheck_path": '/lustre/ckpt "x"',
        "node_health_check_interval": 10.0,
        "segment": None,
    }
    job = add_job(run.Script(path=TRAIN, entrypoint="python"), local(), [FaultTolerancePlugin(nvrx_config=extra)])
    path = job.executor.env_vars["PET_FT_CFG_PATH"]
    config = FaultToleranceConfig.from_yaml_file(path, ignore_not_recognized=False)
    assert {key: getattr(config, key) for key in extra} == extra, Path(path).read_text()
    assert config.rank_section_timeouts["step"] == 180.0  # the plugin's own keys are still there


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (
            {"enable_nic_health_check": True},
            r"enable_nic_health_check.*did you mean 'enable_nic_healthcheck'",
        ),
        ({"rank_section_timeouts": {"step": 60}}, r"rank_section_timeouts.*set FaultTolerancePlugin.section_timeouts"),
        ({"workload_check_interval": 1.0}, r"set FaultTolerancePlugin.workload_check_interval instead"),
        ({"storage_healthcheck_path": ["/a"]}, r"nvrx_config\['storage_healthcheck_path'\].*one YAML scalar"),
        ({"gpu_memory_tolerance_mb": math.nan}, r"nvrx_config\['gpu_memory_tolerance_mb'\].*nan"),
        ("enable_nic_healthcheck=false", r"nvrx_config.*a dict of NVRx FaultToleranceConfig keys"),
    ],
)
def test_a_key_nvrx_would_drop_or_one_the_plugin_owns_is_refused(config, match):
    with pytest.raises(ResiliencyConfigError, match=match):
        FaultTolerancePlugin(nvrx_config=config)
