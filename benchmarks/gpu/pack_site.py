"""Run here, before the device call: pack the Python packages the GPU machine lacks into ``.whl/``.

The GPU machine has Python 3.12, torch 2.11 and transformers 5.17, and no network. The reference workload
also needs Megatron Bridge, Megatron Core, NVRx and their import-time dependencies that the machine's image
does not have. They are taken from this checkout's ``.venv`` (the versions the tests run with), file by file
from each distribution's RECORD (no ``__pycache__``), into two gzip tarballs that ``gpu_proof.sh`` unpacks
onto ``PYTHONPATH``: ``.whl/site.tar.gz`` (site-packages) and ``.whl/nvrx.tar.gz`` (``.venv/nvrx``). About
34 MB in all, under the device tool's 64 MiB limit for carried files. transformers is NOT carried (100 MB
unpacked): the machine's 5.17 is used, although Megatron Bridge 0.6.2 declares ``transformers<=5.12.1``.

Usage: ``.venv/bin/python benchmarks/gpu/pack_site.py [.whl]``
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
import tarfile

# What importing the workload (GPU mode, with in-process restart and straggler detection) loads that the
# GPU machine's image does not provide; found by importing it here and listing sys.modules' distributions.
CARRY = """
antlr4-python3-runtime botocore braceexpand bracex cffi datasets defusedxml deprecation dill filetype
google-api-core google-auth googleapis-common-protos grpcio-tools h2 hpack hyperframe hydra-core jmespath
jsonschema jsonschema-specifications lark megatron-bridge megatron-core megatron-energon multi-storage-client
multiprocess nvidia-resiliency-ext omegaconf opentelemetry-api opentelemetry-exporter-prometheus
opentelemetry-proto opentelemetry-sdk opentelemetry-semantic-conventions rapidyaml referencing rpds-py sniffio
toml wcmatch webdataset xattr
""".split()


def main(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    by_base: dict[str, list[str]] = {}
    for name in CARRY:
        dist = md.distribution(name)
        base = str(dist.locate_file(""))
        for f in dist.files or []:
            rel = str(f)
            if "__pycache__" in rel or rel.startswith(("..", "/")):
                continue
            if os.path.isfile(os.path.join(base, rel)):
                by_base.setdefault(base, []).append(rel)
    for base, files in by_base.items():
        target = os.path.join(out_dir, "nvrx.tar.gz" if base.rstrip("/").endswith("nvrx") else "site.tar.gz")
        with tarfile.open(target, "w:gz") as tar:
            for rel in sorted(files):
                tar.add(os.path.join(base, rel), arcname=rel)
        print(f"{target}: {len(files)} files from {base}, {os.path.getsize(target) / 1e6:.1f} MB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".whl")
