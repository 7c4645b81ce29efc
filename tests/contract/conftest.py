"""Contract tests run our output through Megatron Bridge's and NVRx's real code."""

import pytest


@pytest.fixture(scope="session")
def megatron_bridge():
    """Megatron Bridge's config module, importable on CPU (see testing/te_compat.py for the one shim)."""
    from nemo_resiliency_plugins.testing.te_compat import ensure_megatron_bridge_importable

    ensure_megatron_bridge_importable()
    import megatron.bridge.training.config as config

    return config


@pytest.fixture(scope="session")
def apply_overrides(megatron_bridge):
    """Megatron Bridge's own override applier, as its training scripts call it."""
    from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

    def apply(cfg, args):
        return process_config_with_overrides(cfg, cli_overrides=list(args))

    return apply


@pytest.fixture(scope="session")
def workload(megatron_bridge):
    from nemo_resiliency_plugins.testing import workload

    return workload


@pytest.fixture(scope="session")
def mb_run_plugins(megatron_bridge):
    """Megatron Bridge's real ``recipes/run_plugins.py``.

    Its package ``megatron.bridge.recipes`` imports every model recipe on import (diffusers, ...), none of
    which the plugin file needs, so the file itself is executed from its installed location.
    """
    import importlib.util
    import sys
    from pathlib import Path

    import megatron.bridge

    path = Path(megatron.bridge.__file__).parent / "recipes" / "run_plugins.py"
    spec = importlib.util.spec_from_file_location("megatron_bridge_run_plugins", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
