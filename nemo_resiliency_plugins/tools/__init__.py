"""The ``nemo-resiliency`` command and what it runs: list, show, explain, doctor, rehearse, plan.

Tools ask the plugins and :mod:`nemo_resiliency_plugins.core` for every rule; no plugin imports a tool.
"""
