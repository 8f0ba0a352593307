"""Where the simulated proxy's image reads vllm-ascend's example (sim/pd_proxy_image.py): a clone named
by VLLM_ASCEND_REPO at tag v0.20.2rc1, checked against the file's SHA-256, else one paragraph."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim.pd_proxy_image import EXAMPLE, REPO_ENV, VLLM_ASCEND_TAG, example_source


def clone_with(tmp_path: Path, text: str | None) -> Path:
    """A git work tree holding `text` at the example's path under the tag (no tag when None)."""
    repo = tmp_path / "vllm-ascend"
    (repo / EXAMPLE).parent.mkdir(parents=True)
    (repo / EXAMPLE).write_text(text or "")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "example"], check=True)
    if text is not None:
        subprocess.run([*git, "tag", VLLM_ASCEND_TAG], check=True)
    return repo


def test_a_file_that_is_not_the_tags_example_is_refused_with_its_digest(tmp_path, monkeypatch):
    monkeypatch.setenv(REPO_ENV, str(clone_with(tmp_path, "print('a proxy of our own')\n")))
    with pytest.raises(RuntimeError, match=f"is not the file of vllm-ascend {VLLM_ASCEND_TAG} \\(its SHA-256 is [0-9a-f]{{64}}"):
        example_source()


def test_a_clone_without_the_tag_is_one_paragraph_naming_the_variable(tmp_path, monkeypatch):
    repo = clone_with(tmp_path, None)
    monkeypatch.setenv(REPO_ENV, str(repo))
    with pytest.raises(RuntimeError) as raised:
        example_source()
    message = str(raised.value)
    assert f"could not be read from {REPO_ENV}={repo}" in message and "\n" not in message
    assert f"Set {REPO_ENV} to a clone of https://github.com/vllm-project/vllm-ascend" in message


def sdist_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    """A .tar.gz laid out as vllm-ascend's sdist, holding `files` (paths relative to its top folder)."""
    import io
    import tarfile

    path = tmp_path / "vllm_ascend-0.20.2rc1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"vllm_ascend-0.20.2rc1/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_without_a_clone_the_example_comes_from_the_cached_sdist_and_a_sdist_without_it_is_one_paragraph(tmp_path, monkeypatch):
    import hashlib

    from sim import pd_proxy_image

    monkeypatch.delenv(REPO_ENV, raising=False)
    text = b"print('the example')\n"
    cached = sdist_with(tmp_path, {EXAMPLE: text})
    monkeypatch.setattr(pd_proxy_image, "SDIST_CACHE", cached)
    monkeypatch.setattr(pd_proxy_image, "SDIST_SHA256", hashlib.sha256(cached.read_bytes()).hexdigest())
    monkeypatch.setattr(pd_proxy_image, "EXAMPLE_SHA256", hashlib.sha256(text).hexdigest())
    assert example_source() == text.decode()
    (tmp_path / "other").mkdir()
    empty = sdist_with(tmp_path / "other", {"README.md": b"no example\n"})
    monkeypatch.setattr(pd_proxy_image, "SDIST_CACHE", empty)
    monkeypatch.setattr(pd_proxy_image, "SDIST_SHA256", hashlib.sha256(empty.read_bytes()).hexdigest())
    with pytest.raises(RuntimeError) as raised:
        example_source()
    assert f"could not be read from {pd_proxy_image.SDIST_URL}" in str(raised.value) and "\n" not in str(raised.value)
