"""The package's one version source (pyproject reads it at build time; a leaf so that any module may import it
without importing the package root, whose lazy exports name every plugin)."""

__version__ = "0.1.0"
