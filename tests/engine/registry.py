"""A real image registry on loopback, for the engine test that pulls an image the host does not have.

The registry is the CNCF distribution registry (Debian's package `docker-registry`, v2.8), run as
`docker-registry serve CONFIG` on 127.0.0.1 with its storage in a temporary folder. dockerd pulls
from it over plain HTTP with no configuration: it counts every registry on 127.0.0.0/8 as
insecure (moby/moby `registry/config.go`, `LoadInsecureRegistries`: "Localhost is by default
considered as an insecure registry"; v20.10, the simulated host's Docker).

What is pushed there is the stand-in image plus one layer of its own (`published_image`), removed
locally once pushed: a pull of an image whose ID the daemon already has fetches no blob at all
(moby/moby `distribution/pull_v2.go`, `pullSchema2`: "If the image already exists locally, no need
to pull anything"), and the stand-in itself stays local, for the compose containers and the other tests.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path

from sim.host import free_port
from sim.docker_cli import local_docker
from tests.support.rolling import derived_image
from tests.support.waits import wait_for

BINARY = "docker-registry"
PACKAGE = "docker-registry"
"""The Debian package with the registry binary (`apt-get install docker-registry`)."""
REPOSITORY = "ascend-fleet/npu-sim"
SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"


def missing() -> str | None:
    """Why the registry cannot run here, or None."""
    if shutil.which(BINARY) is None:
        return f"{BINARY} is not on PATH: install Debian's package {PACKAGE} (`apt-get install {PACKAGE}`)"
    return None


class LocalRegistry:
    """A registry on 127.0.0.1 with filesystem storage under `workdir`; `start`, then `stop`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log = workdir / "registry.log"
        self.process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        config = self.workdir / "config.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "data")}},
            "http": {"addr": self.address},
        }))  # fmt: skip
        with self.log.open("w") as log:
            self.process = subprocess.Popen([BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        wait_for(f"the registry answering on {self.address}", self._ready, seconds=60, every=0.2, detail=self.log.read_text)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"{BINARY} exited {self.process.returncode}:\n{self.log.read_text()}")
        with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=5) as resp:
            return resp.status == 200

    def manifest(self, tag: str) -> dict:
        """The image manifest of REPOSITORY:`tag` (its `config` and `layers` blobs, each with its `digest`)."""
        url = f"http://{self.address}/v2/{REPOSITORY}/manifests/{tag}"
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": SCHEMA2}), timeout=10) as resp:
            return json.load(resp)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def published_image(registry: LocalRegistry, tag: str) -> None:
    """The stand-in image with a layer no other image has, pushed to `registry` as REPOSITORY:`tag`
    and gone from the daemon (so a pull downloads that layer and the image's config)."""
    image = derived_image(f"{registry.address}/{REPOSITORY}:{tag}", f"RUN echo {uuid.uuid4().hex} > /etc/ascend-fleet-pulled")
    local_docker("push", image, timeout=300)
    local_docker("image", "rm", image)
