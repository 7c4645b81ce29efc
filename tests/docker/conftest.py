"""Make the session-scoped ``local_docker`` fixture (tests/docker_fixture.py) available to tests/docker."""

from tests.docker_fixture import local_docker  # noqa: F401
