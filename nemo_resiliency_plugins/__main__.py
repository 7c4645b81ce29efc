"""``python -m nemo_resiliency_plugins``: the ``nemo-resiliency`` command, for environments whose scripts
directory is not on PATH (a training image, ``pip install --user``, a venv that is not activated)."""

from nemo_resiliency_plugins.tools.cli import main

if __name__ == "__main__":
    main()
