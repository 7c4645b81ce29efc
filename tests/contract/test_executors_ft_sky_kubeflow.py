"""FaultTolerancePlugin on SkyPilot (cluster and managed jobs) and Kubeflow; KubeRay refused.

These executors need their own packages (``skypilot``, ``kubernetes``: NeMo-Run's ``skypilot`` and
``kubeflow`` extras), which conflict with the project's .venv (urllib3, click): run this file with
``.venv-executors`` (``.ci/setup-executors-env``). KubeflowExecutor loads a kubeconfig when it is built: the
tests give it one that points at an address nothing listens on; the dry run makes no API call.
"""

from __future__ import annotations

import os

import nemo_run as run
import pytest

from nemo_resiliency_plugins import FaultTolerancePlugin, ResiliencyConfigError
from nemo_resiliency_plugins.core.executors import for_executor
from nemo_resiliency_plugins.recipes import RECIPES
from nemo_resiliency_plugins.tools.explain import EXTRA_EXECUTOR_KINDS, make_executor
from tests.contract.executor_jobs import env_and_launch_lines, parse_launch, render, run_as_node
from tests.contract.test_executors_ft import assert_sections_reach_the_rank_monitor

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}
  name: none
contexts:
- context: {cluster: none, user: none, namespace: default}
  name: none
current-context: none
users:
- name: none
  user: {token: none}
"""


@pytest.fixture
def kube_home(tmp_path, monkeypatch):
    """A HOME whose ~/.kube/config the kubernetes client loads (KUBECONFIG is read once, at its import)."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(KUBECONFIG)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return home


def kubeflow(nodes=2, pvc="work-pvc", **kw):
    return run.KubeflowExecutor(
        image="nvcr.io/nvidia/nemo:dev",
        num_nodes=nodes,
        gpus_per_node=8,
        workdir_pvc=pvc,
        packager=run.Packager(),
        **kw,
    )


# --------------------------------------------------------------------------------------------- SkyPilot


@pytest.mark.parametrize("cls", [run.SkypilotExecutor, run.SkypilotJobsExecutor])
@pytest.mark.parametrize("nodes", [1, 2])
def test_skypilot_job_gives_ft_launcher_the_sections(cls, nodes, tmp_path, monkeypatch):
    job = render(cls(gpus="H100", gpus_per_node=8, num_nodes=nodes), [FaultTolerancePlugin()])
    task = job.request.task  # the sky.Task NeMo-Run hands to SkyPilot
    assert task.file_mounts["/nemo_run"] == job.job_dir
    ranks = []
    for rank in range(nodes):
        ips = "\n".join(f"10.0.0.{i + 1}" for i in range(nodes))
        node_env = {**task.envs, "SKYPILOT_NODE_IPS": ips, "SKYPILOT_NODE_RANK": str(rank)}
        seen = run_as_node(tmp_path, task.run, node_env)
        view = parse_launch(seen, "/nemo_run", job.job_dir, monkeypatch)
        assert_sections_reach_the_rank_monitor(view)
        assert view.args.node_rank == rank
        assert view.args.rdzv_endpoint == ("localhost:0" if nodes == 1 else "10.0.0.1:29500")
        ranks.append(view.env.get("GROUP_RANK"))
    # One node: GROUP_RANK=0; several: none, so NVRx assigns distinct infrastructure ranks itself.
    assert ranks == (["0"] if nodes == 1 else [None] * nodes)
    assert job.executor.retries == 0


def test_skypilot_constant_group_rank_on_several_nodes_is_refused():
    executor = run.SkypilotExecutor(gpus="H100", gpus_per_node=8, num_nodes=2, env_vars={"GROUP_RANK": "0"})
    with pytest.raises(ResiliencyConfigError, match="Duplicate infrastructure ranks"):
        render(executor, [FaultTolerancePlugin(num_job_retries_on_failure=0)])


def test_skypilot_explicit_retries_are_refused():
    with pytest.raises(ResiliencyConfigError, match="do not read executor.retries"):
        render(run.SkypilotExecutor(gpus="H100", num_nodes=1), [FaultTolerancePlugin(num_job_retries_on_failure=3)])


# --------------------------------------------------------------------------------------------- Kubeflow


def test_kubeflow_with_pvc_gives_ft_launcher_the_sections(kube_home, tmp_path, monkeypatch):
    job = render(kubeflow(), [FaultTolerancePlugin()])
    with open(os.path.join(job.job_dir, "launch.sh")) as handle:  # what the pods run from the PVC
        script = handle.read()
    for rank in (0, 1):
        node = {"PET_MASTER_ADDR": "train-node-0", "PET_NODE_RANK": str(rank)}
        seen = run_as_node(tmp_path, env_and_launch_lines(script), node)
        view = parse_launch(seen, job.executor.code_dir, job.job_dir, monkeypatch)
        assert_sections_reach_the_rank_monitor(view)
        assert view.args.node_rank == rank and view.args.rdzv_endpoint == "train-node-0:29500"
        assert "GROUP_RANK" not in view.env
        assert "TASK_VAR" not in view.env  # Kubeflow drops run.Script(env=...): the plugins use executor env
    assert job.executor.retries == 0


def test_kubeflow_without_pvc_is_refused(kube_home):
    with pytest.raises(ResiliencyConfigError, match=r"executor\.workdir_pvc = None.*Set workdir_pvc"):
        render(kubeflow(nodes=1, pvc=None), [FaultTolerancePlugin(num_job_retries_on_failure=0)])


def test_kubeflow_grace_period_comes_from_the_pod_spec(kube_home):
    assert for_executor(kubeflow()).grace_period_s() == 30.0
    overridden = kubeflow(pod_spec_overrides={"terminationGracePeriodSeconds": 600})
    assert for_executor(overridden).grace_period_s() == 600.0


# ----------------------------------------------------------------------------------------------- KubeRay


def test_kuberay_is_refused_by_name_with_the_alternative(kube_home):
    from nemo_run.core.execution.kuberay import KubeRayExecutor

    with pytest.raises(ResiliencyConfigError, match="KubeRayExecutor runs Ray clusters.*use run.KubeflowExecutor"):
        FaultTolerancePlugin().setup(run.Script(path="/workspace/train.py", entrypoint="python"), KubeRayExecutor())


# ------------------------------------------------------------------ explain / doctor on these executors


EXTRA_CLAIMS = [
    (name, kind)
    for name, recipe in sorted(RECIPES.items())
    for kind in recipe.executors
    if kind in EXTRA_EXECUTOR_KINDS
]


def test_some_recipe_claims_an_executor_that_needs_extras():
    assert ("kubernetes", "kubeflow") in EXTRA_CLAIMS


@pytest.mark.parametrize(("name", "executor"), EXTRA_CLAIMS)
def test_explain_and_doctor_on_every_claimed_executor_that_needs_extras(name, executor, kube_home):
    import json

    from tests.cli.test_cli import cli

    out = cli("explain", name, "--executor", executor, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads(out.stdout)
    assert all(e["error"] is None for e in data["effects"]) and "ft_launcher" in data["command"]
    out = cli("doctor", name, "--executor", executor, "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0, [c for c in data["checks"] if c["verdict"] == "FAIL"]
    verdicts = {c["name"]: c["verdict"] for c in data["checks"]}
    assert verdicts["section timeouts declared"] == "pass"


@pytest.mark.parametrize("kind", EXTRA_EXECUTOR_KINDS)
def test_explain_builds_each_extra_executor(kind, kube_home):
    assert for_executor(make_executor(kind, nodes=2)).nodes() == 2
