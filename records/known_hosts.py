"""Finding a host's key in a known_hosts file's text, as OpenSSH does. Pure.

The Pulumi host check connects with pulumi-command's Go SSH client, which
trusts any host key unless it is given one (`host_key`). So the program looks
the key up where the system `ssh` of the docker provider and `doctor` would:
plain and hashed (`|1|salt|hmac`) entries, `[address]:port` for other ports
than 22, as sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT" describes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac


def _name(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _matches(field: str, name: str) -> bool:
    if field.startswith("|1|"):
        try:
            salt, digest = (base64.b64decode(part) for part in field[3:].split("|", 1))
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)
    # Wildcards and negations are left to ssh itself; a pinned key must be named exactly.
    return name in field.split(",")


def find_host_key(text: str, address: str, port: int) -> str | None:
    """`type base64` of the first key for the host, or None; revoked and CA lines are skipped."""
    name = _name(address, port)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0].startswith(("#", "@")):
            continue
        if _matches(fields[0], name):
            return f"{fields[1]} {fields[2]}"
    return None
