"""Make the session-scoped ``local_slurm`` fixture (tests/slurm_fixture.py) available to tests/slurm."""

from tests.slurm_fixture import local_slurm  # noqa: F401
