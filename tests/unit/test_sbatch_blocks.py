"""The bash this package adds to sbatch scripts lives in core/sbatch/*.sh: linted as shell, loaded as data."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources

from nemo_resiliency_plugins.core import slurm_script

SBATCH = resources.files("nemo_resiliency_plugins.core") / "sbatch"


def _blocks() -> list:
    return sorted((p for p in SBATCH.iterdir() if p.name.endswith(".sh")), key=lambda p: p.name)


def test_every_block_passes_shellcheck():
    # .ci/test installs shellcheck (Debian's package) when it is missing: no skip here.
    program = shutil.which("shellcheck")
    assert program, "shellcheck is not installed (apt-get install shellcheck; .ci/test does it)"
    files = [str(p) for p in _blocks()]
    assert len(files) >= 3, files
    out = subprocess.run([program, "--severity=info", *files], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_blocks_reach_the_script_without_lint_directives_and_with_their_mark():
    for block, mark in (
        (slurm_script._CHAIN_HELPERS, slurm_script._CHAIN_HELPERS_MARK),
        (slurm_script._REQUEUE_GUARD, slurm_script._REQUEUE_GUARD_MARK),
        (slurm_script._FORWARD, slurm_script._FORWARD_MARK),
    ):
        assert block.startswith(mark + "\n"), block[:80]
        assert "# shellcheck " not in block
        assert not block.endswith("\n")
