"""Run here, before the device call: pack the Python packages the GPU machine lacks into ``.whl/``.

The GPU machine has Python 3.12, torch 2.11 and transformers 5.17, and no network. The reference workload
also needs Megatron Bridge, Megatron Core, NVRx and their import-time dependencies that the machine's image
does not have. They are taken from this checkout's ``.venv`` (the versions the tests run with), file by file
from each distribution's RECORD (no ``__pycache__``), into two gzip tarballs that ``gpu_proof.sh`` unpacks
onto ``PYTHONPATH``: ``.whl/site.tar.gz`` (site-packages) and ``.whl/nvrx.tar.gz`` (``.venv/nvrx``). About
34 MB in all, under the device tool's 64 MiB limit for carried files. transformers is NOT carried (100 MB
unpacked): the machine's 5.17 is used, although Megatron Bridge 0.6.2 declares ``transformers<=5.12.1``.

Usage: ``.venv/bin/python benchmarks/gpu/pack_site.py [.whl [WHEEL_DIR]]`` (WHEEL_DIR: see ``pack_wheels``)
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import tarfile
import zipfile

# What importing the workload (GPU mode, with in-process restart and straggler detection) loads that the
# GPU machine's image does not provide; found by importing it here and listing sys.modules' distributions.
CARRY = """
antlr4-python3-runtime botocore braceexpand bracex cffi datasets defusedxml deprecation dill filetype
google-api-core google-auth googleapis-common-protos grpcio-tools h2 hpack hyperframe hydra-core jmespath
jsonschema jsonschema-specifications lark megatron-bridge megatron-core megatron-energon multi-storage-client
multiprocess nvidia-resiliency-ext omegaconf opentelemetry-api opentelemetry-exporter-prometheus
opentelemetry-proto opentelemetry-sdk opentelemetry-semantic-conventions rapidyaml referencing rpds-py sniffio
toml wcmatch webdataset xattr
pydantic pydantic-core annotated-types typing-inspection
""".split()
# (The last line: ModelOpt's imports, for the real-pretrain proof; see pack_wheels.)

# NeMo-Run itself, for the job launched through ``run.Experiment`` on the GPU machine (``nemorun_job.py``): what
# ``import nemo_run`` + its LocalExecutor, torchx local scheduler and ft_launcher component import, plus this
# package's plugins, minus what the machine's image has (found by importing them here and listing sys.modules'
# distributions against KINDS.md's package list). typer, click and rich are in the image, but nemo-run's CLI
# decorators need the versions it was tested with, so ours travel too. Into ``nemorun.tar.gz``; ~?? MB.
NEMORUN = """
nemo_run torchx fiddle fabric invoke paramiko bcrypt PyNaCl cryptography catalogue contextlib2 decorator
docstring_parser exceptiongroup fastapi starlette graphviz importlib_metadata lazy-importer leptonai ledoc-ui
libcst loguru prometheus-fastapi-instrumentator python-multipart uvicorn watchfiles typer click rich
""".split()


def main(out_dir: str, names: list[str] = CARRY, site_name: str = "site.tar.gz") -> None:
    os.makedirs(out_dir, exist_ok=True)
    by_base: dict[str, list[str]] = {}
    for name in names:
        dist = md.distribution(name)
        base = str(dist.locate_file(""))
        for f in dist.files or []:
            rel = str(f)
            if "__pycache__" in rel or rel.startswith(("..", "/")):
                continue
            if os.path.isfile(os.path.join(base, rel)):
                by_base.setdefault(base, []).append(rel)
    for base, files in by_base.items():
        target = os.path.join(out_dir, "nvrx.tar.gz" if base.rstrip("/").endswith("nvrx") else site_name)
        with tarfile.open(target, "w:gz") as tar:
            for rel in sorted(files):
                tar.add(os.path.join(base, rel), arcname=rel)
        print(f"{target}: {len(files)} files from {base}, {os.path.getsize(target) / 1e6:.1f} MB")


# The real-pretrain proof (pretrain_proof.py) imports Megatron Bridge's training loop, whose modules
# (train.py, checkpointing.py, gpt_step.py) import ModelOpt unconditionally; ModelOpt imports PuLP. Neither is in
# this .venv (megatron-core lists ModelOpt under its "dev" extra only) nor on the GPU machine. They travel as
# wheels (``pip download --no-deps nvidia-modelopt==0.47.0 "pulp<4.0"``), unpacked into ``extra.tar.gz``
# without PuLP's bundled solver binaries (31 MB; ModelOpt's import of PuLP does not run a solver).
EXTRA_SKIP = ("pulp/solverdir/",)


def pack_wheels(wheel_dir: str, out_dir: str) -> None:
    """Unpack every wheel in ``wheel_dir`` into ``out_dir/extra.tar.gz`` (minus ``EXTRA_SKIP``)."""
    target = os.path.join(out_dir, "extra.tar.gz")
    count = 0
    with tarfile.open(target, "w:gz") as tar:
        for name in sorted(os.listdir(wheel_dir)):
            if not name.endswith(".whl"):
                continue
            with zipfile.ZipFile(os.path.join(wheel_dir, name)) as whl:
                for info in whl.infolist():
                    if info.is_dir() or info.filename.startswith(EXTRA_SKIP):
                        continue
                    entry = tarfile.TarInfo(info.filename)
                    entry.size = info.file_size
                    with whl.open(info) as data:
                        tar.addfile(entry, data)
                    count += 1
    print(f"{target}: {count} files from the wheels in {wheel_dir}, {os.path.getsize(target) / 1e6:.1f} MB")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--nemo-run"]:  # pack_site.py --nemo-run OUT: nemo-run and its imports only
        main(sys.argv[2] if len(sys.argv) > 2 else ".whl", NEMORUN, "nemorun.tar.gz")
        sys.exit(0)
    main(sys.argv[1] if len(sys.argv) > 1 else ".whl")
    if len(sys.argv) > 2:  # pack_site.py OUT WHEEL_DIR: also the real-pretrain proof's extra wheels
        pack_wheels(sys.argv[2], sys.argv[1] if len(sys.argv) > 1 else ".whl")
