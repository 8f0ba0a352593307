"""The image a disaggregated service runs on the simulated host: the npu-sim stand-in plus vllm-ascend's
own proxy example, so that the proxy in front of the prefillers and decoders is the real one.

vllm-ascend's image carries its repository at /vllm-workspace/vllm-ascend (its Dockerfile at v0.20.2rc1:
`COPY . /vllm-workspace/vllm-ascend/`), so a deployment runs the proxy from the service's own image:
`python3 /vllm-workspace/vllm-ascend/examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py`
with the plan's proxy `args`. `build_pd_image(docker)` makes `PD_IMAGE`, which a stack on the simulated
host names as its service image, the same way:

- `FROM ascend-fleet/npu-sim:latest`, so its prefill and decode instances are the stand-in's (sim/npu-sim/kv.sh);
- the CPython the project's venv runs, as sim/router_image.py copies it (`python_layout`), and `python3`;
- the distributions the example imports, pinned in sim/pd-proxy/requirements.txt and installed here with
  pip into a scratch folder (`--target`, never the venv), then copied into the image's site-packages;
- the example itself at its path in vllm-ascend's image, read from the vllm-ascend repository at tag
  v0.20.2rc1: from a clone named by `VLLM_ASCEND_REPO` (its git folder or work tree), else from
  vllm-ascend's sdist on PyPI (which carries `examples/`), and checked against its SHA-256. This repository does not carry vllm-ascend's source.

It is cached by a content hash (label `ascend-fleet.npu-sim-pd.hash`) of the base image id, the copied
interpreter, the requirements and the example, like the router stand-in.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from sim.ascend_files import SIM_DIR
from sim.npu_image import IMAGE
from sim.router_image import STDLIB, build_on_base, content_hash, inspect, python_layout, with_shared_libraries

PD_IMAGE = "ascend-fleet/npu-sim-pd:latest"
HASH_LABEL = "ascend-fleet.npu-sim-pd.hash"
VLLM_ASCEND_TAG = "v0.20.2rc1"
EXAMPLE = "examples/disaggregated_prefill_v1/load_balance_proxy_server_example.py"
EXAMPLE_SHA256 = "46aeefb027b684681b945911c29ccb3d71a3bd7e396ed6c0d9c3e91838457e07"
"""The example at vllm-ascend v0.20.2rc1 (`git show v0.20.2rc1:<EXAMPLE> | sha256sum`)."""
PROXY_SCRIPT = Path("/vllm-workspace/vllm-ascend") / EXAMPLE
"""Where vllm-ascend's image carries the example (Dockerfile: `COPY . /vllm-workspace/vllm-ascend/`)."""
REPO_ENV = "VLLM_ASCEND_REPO"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/89/52/e7e191b5d37fade131f1dad44cd31f6d5371df9e190f4666f825cc9ed131/"
    "vllm_ascend-0.20.2rc1.tar.gz"
)
SDIST_SHA256 = "8ebd5c5b2ef5009baae1c5ddee390a0fe2821ef31aa33312a0b491f5b5185797"
"""PyPI's digest of vllm-ascend's 0.20.2rc1 sdist (https://pypi.org/simple/vllm-ascend/)."""
SDIST_MAX_BYTES = 64 << 20
SDIST_CACHE = Path.home() / ".cache" / "ascend-fleet" / "vllm_ascend-0.20.2rc1.tar.gz"
REQUIREMENTS = SIM_DIR / "pd-proxy" / "requirements.txt"


def example_source() -> str:
    """The example's text at `VLLM_ASCEND_TAG`, from `VLLM_ASCEND_REPO` or vllm-ascend's sdist on PyPI (which
    carries `examples/`); one paragraph when neither gives it or what they give is not that file."""
    repo = os.environ.get(REPO_ENV)
    where = f"{REPO_ENV}={repo}" if repo else SDIST_URL
    try:
        if repo:
            git = ["git", "--git-dir", str(Path(repo) / ".git")] if (Path(repo) / ".git").exists() else ["git", "--git-dir", repo]
            data = subprocess.run([*git, "show", f"{VLLM_ASCEND_TAG}:{EXAMPLE}"], capture_output=True, check=True).stdout
        else:
            data = _from_sdist()
    except (OSError, subprocess.CalledProcessError, tarfile.TarError, KeyError) as err:
        detail = err.stderr.decode().strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
        raise RuntimeError(
            f"the simulated disaggregated service runs vllm-ascend's own proxy example ({EXAMPLE} at "
            f"{VLLM_ASCEND_TAG}), and it could not be read from {where}: {detail}. Set {REPO_ENV} to a clone of "
            "https://github.com/vllm-project/vllm-ascend (its .git folder or work tree) that has the tag, or let "
            "this machine reach files.pythonhosted.org."
        ) from None
    if hashlib.sha256(data).hexdigest() != EXAMPLE_SHA256:
        raise RuntimeError(
            f"{EXAMPLE} read from {where} is not the file of vllm-ascend {VLLM_ASCEND_TAG} (its SHA-256 is "
            f"{hashlib.sha256(data).hexdigest()}, not {EXAMPLE_SHA256})."
        )
    return data.decode()


def _from_sdist() -> bytes:
    """The example from vllm-ascend's sdist of `VLLM_ASCEND_TAG` (PyPI's files, which this machine and CI
    reach; GitHub they may not), downloaded once into `SDIST_CACHE` and checked against PyPI's SHA-256."""
    if not SDIST_CACHE.exists() or hashlib.sha256(SDIST_CACHE.read_bytes()).hexdigest() != SDIST_SHA256:
        SDIST_CACHE.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(SDIST_URL, timeout=120) as response:
            data = response.read(SDIST_MAX_BYTES + 1)
        if len(data) > SDIST_MAX_BYTES or hashlib.sha256(data).hexdigest() != SDIST_SHA256:
            raise OSError(f"{SDIST_URL} is not vllm-ascend's sdist of {VLLM_ASCEND_TAG} (SHA-256 {SDIST_SHA256})")
        partial = SDIST_CACHE.with_suffix(".partial")
        partial.write_bytes(data)
        partial.replace(SDIST_CACHE)
    with tarfile.open(SDIST_CACHE, "r:gz") as sdist:
        member = sdist.extractfile(f"vllm_ascend-{VLLM_ASCEND_TAG.removeprefix('v')}/{EXAMPLE}")
        if member is None:
            raise KeyError(f"{EXAMPLE} is not a file in the sdist")
        return member.read()


def _installed(target: Path) -> dict[Path, Path]:
    """pip's files under `target`, by their path in the image's site-packages (scripts left out: the
    example is run with python3)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", "--target", str(target), "-r", str(REQUIREMENTS)],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    site_packages = STDLIB / "site-packages"
    return {
        site_packages / path.relative_to(target): path
        for path in sorted(target.rglob("*"))
        if path.is_file() and path.relative_to(target).parts[0] != "bin" and "__pycache__" not in path.parts
    }


def build_pd_image(docker: list[str], base_image: str = IMAGE) -> str:
    """Make `PD_IMAGE` on the daemon `docker` (the CLI argv that reaches it) from `base_image` unless the
    image with the same content is there; its tag."""
    base_id = inspect(docker, "{{.Id}}", base_image)
    if base_id is None:
        raise RuntimeError(f"the disaggregated stand-in needs {base_image} on the simulated host")
    example = example_source()
    interpreter = python_layout()
    want = content_hash(base_id, interpreter, REQUIREMENTS.read_text() + "\0" + example)
    if inspect(docker, f'{{{{ index .Config.Labels "{HASH_LABEL}" }}}}', PD_IMAGE) == want:
        return PD_IMAGE
    with tempfile.TemporaryDirectory(prefix="pd-proxy-packages-") as target:
        layout = with_shared_libraries(interpreter | _installed(Path(target)))
        build_on_base(
            docker, base_image, PD_IMAGE, f"{HASH_LABEL}={want}", layout,
            {PROXY_SCRIPT.relative_to("/"): example},
            "# The npu-sim stand-in plus vllm-ascend's proxy example, its Python and packages (sim/pd_proxy_image.py).",
        )  # fmt: skip
    return PD_IMAGE
