"""Host keys are found in known_hosts as OpenSSH writes it: plain, hashed by `ssh-keygen -H`, with ports."""

from __future__ import annotations

import subprocess
from pathlib import Path

from records.known_hosts import find_host_key

KEY_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
KEY_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBj4dVx0qkO9pLWQ0oAh0fb3m3d7JMhmE8VY1sYVc8mN"


def test_plain_entries_are_matched_by_address_and_by_bracketed_address_and_port():
    text = f"# comment\nnpu-a.example,10.0.0.1 {KEY_A} root@npu-a\n[10.0.0.2]:2222 {KEY_B}\n"
    assert find_host_key(text, "10.0.0.1", 22) == KEY_A
    assert find_host_key(text, "npu-a.example", 22) == KEY_A
    assert find_host_key(text, "10.0.0.2", 2222) == KEY_B
    assert find_host_key(text, "10.0.0.2", 22) is None
    assert find_host_key(text, "10.0.0.1", 2222) is None


def test_entries_hashed_by_ssh_keygen_are_matched(tmp_path: Path):
    path = tmp_path / "known_hosts"
    path.write_text(f"10.0.0.1 {KEY_A}\n[10.0.0.2]:2222 {KEY_B}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
    hashed = path.read_text()
    assert "10.0.0.1" not in hashed and hashed.startswith("|1|")
    assert find_host_key(hashed, "10.0.0.1", 22) == KEY_A
    assert find_host_key(hashed, "10.0.0.2", 2222) == KEY_B
    assert find_host_key(hashed, "10.0.0.3", 22) is None


def test_revoked_and_certificate_authority_lines_are_not_host_keys():
    text = f"@revoked 10.0.0.1 {KEY_B}\n@cert-authority 10.0.0.1 {KEY_B}\n10.0.0.1 {KEY_A}\n"
    assert find_host_key(text, "10.0.0.1", 22) == KEY_A
