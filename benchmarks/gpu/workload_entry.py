"""Entry point of the reference workload on the GPU machine.

The GPU machine has no nemo-run (and its dependency tree is too large to carry), and the workload does not
need it: only ``nemo_resiliency_plugins/__init__.py`` imports the plugins, and through them nemo-run. This
entry registers the package by its path without running that ``__init__`` (the plugin modules are simply
not loaded), then runs :func:`nemo_resiliency_plugins.testing.workload.main` with the command-line overrides.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _register_package_without_plugins() -> None:
    if "nemo_resiliency_plugins" in sys.modules:
        return
    spec = importlib.util.spec_from_loader("nemo_resiliency_plugins", loader=None, is_package=True)
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [os.path.join(_ROOT, "nemo_resiliency_plugins")]
    sys.modules["nemo_resiliency_plugins"] = module


if __name__ == "__main__":
    _register_package_without_plugins()
    from nemo_resiliency_plugins.testing import workload

    workload.main()
