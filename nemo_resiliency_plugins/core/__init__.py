"""The shared mechanism: the only code that edits a NeMo-Run task or executor.

Every plugin's ``setup()`` calls these modules and nothing else changes a job. They import no plugin, so a rule
written here is the same rule for every plugin (and for ``doctor``/``explain``, which ask them).

* :mod:`.validation` -- field checks (``Checker``) behind every plugin's ``__post_init__``
* :mod:`.hydra_overrides`, :mod:`.task_config` -- read and set Megatron Bridge config fields on a task
* :mod:`.front_program` -- a program of ours that each rank runs before the task's own
* :mod:`.autoresume` -- the checkpoint ``save``/``load`` rule a restart needs
* :mod:`.executor_config`, :mod:`.executors` -- env, retries, launchers and files, one rules class per executor
* :mod:`.slurm_script` -- the blocks this package adds to an sbatch script
* :mod:`.nvrx_launcher` -- NVRx's ``ft_launcher`` settings and its YAML
* :mod:`.known_bugs` -- upstream bugs detected from the installed code
* :mod:`.diagnostics` -- what makes a hang attributable afterwards (stack dumps, the collective flight recorder)
"""
