"""The broker's files for a provisioned fleet: ``mosquitto.conf``, the password file and the ACL.

Mosquitto 2 reads them (``docs/trust.md`` explains each line). The password file's hashes are made
by Debian's ``mosquitto_passwd -U`` when it is installed (the plain ``user:password`` line goes
through a 0600 file in a 0700 folder, never through a command line that ``ps`` shows); without the
tool the same PBKDF2-SHA512 line Mosquitto 2 reads (``$7$`` format, 101 iterations, 12-byte salt)
is written with :mod:`hashlib` — Mosquitto's own format, which no Python library writes.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from protocols.identity import write_secret
from protocols.uplink import TOPIC_ROOT

#: Mosquitto 2's PBKDF2-SHA512 parameters (mosquitto_passwd's defaults).
PBKDF2_ITERATIONS: Final = 101
SALT_BYTES: Final = 12


class BrokerFileError(RuntimeError):
    """A broker file could not be written; the message says which and why."""


def pbkdf2_line(user: str, password: str, salt: bytes | None = None) -> str:
    """A Mosquitto 2 password-file line (``user:$7$101$salt$hash``, base64) for ``password``."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, PBKDF2_ITERATIONS, 64)
    b64 = base64.b64encode
    return f"{user}:$7${PBKDF2_ITERATIONS}${b64(salt).decode()}${b64(digest).decode()}"


def mosquitto_passwd() -> str | None:
    """Path of Debian's ``mosquitto_passwd``, or None."""
    return shutil.which("mosquitto_passwd") or (
        "/usr/bin/mosquitto_passwd" if os.access("/usr/bin/mosquitto_passwd", os.X_OK) else None
    )


def hash_line(user: str, password: str, tool: str | None = None) -> str:
    """The password-file line for ``user``, hashed by ``mosquitto_passwd -U`` when available."""
    tool = mosquitto_passwd() if tool is None else tool
    if not tool:
        return pbkdf2_line(user, password)
    with tempfile.TemporaryDirectory(prefix="frota-passwd-") as folder:  # mode 0700
        plain = Path(folder) / "passwd"
        write_secret(plain, f"{user}:{password}\n".encode())
        done = subprocess.run([tool, "-U", str(plain)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BrokerFileError(f"mosquitto_passwd failed: {done.stderr.strip() or done.stdout.strip()}")
        line = plain.read_text().strip()
    if not line.startswith(f"{user}:$"):
        raise BrokerFileError("mosquitto_passwd wrote an unexpected line")
    return line


def set_password(passwd: Path, user: str, line: str | None) -> None:
    """Replace ``user``'s line in the password file (remove it when ``line`` is None)."""
    lines = passwd.read_text().splitlines() if passwd.exists() else []
    kept = [old for old in lines if old.split(":", 1)[0] != user]
    if line is not None:
        kept.append(line)
    write_secret(passwd, ("\n".join(kept) + "\n").encode() if kept else b"")


def acl_text(collectors: Iterable[str], vehicles: Iterable[str]) -> str:
    """The ACL: a bus writes only its own ``up`` and ``status`` and reads only its own ``ack``;
    only collectors write acks and read every bus's ``up`` and ``status``; collectors read and
    write the evaluation notices (protocols/evaluated.py: a collector's monitor reads them)."""
    out = [
        "# Written by frota provision; regenerated on every change (docs/trust.md).",
        "# Anyone not listed here may do nothing.",
        "",
    ]
    for name in sorted(collectors):
        out += [
            f"user {name}",
            f"topic read {TOPIC_ROOT}/+/up",
            f"topic read {TOPIC_ROOT}/+/status",
            f"topic write {TOPIC_ROOT}/+/ack",
            f"topic readwrite {TOPIC_ROOT}/evaluated",
            "",
        ]
    for vehicle in sorted(vehicles):
        out += [
            f"user {vehicle}",
            f"topic write {TOPIC_ROOT}/{vehicle}/up",
            f"topic readwrite {TOPIC_ROOT}/{vehicle}/status",
            f"topic read {TOPIC_ROOT}/{vehicle}/ack",
            "",
        ]
    return "\n".join(out)


DYNSEC_HEADER: Final = (
    "# Written by frota provision (docs/trust.md). Restart the broker after",
    "# frota provision vehicle/collector/revoke: Mosquitto 2.0 reads the dynamic",
    "# security file only when it starts (SIGHUP does not re-read it).",
)
FILES_HEADER: Final = (
    "# Written by frota provision init (docs/trust.md). Reload with SIGHUP after",
    "# frota provision vehicle/collector/revoke to read the password file and ACL again.",
    "# The ACL file cannot refuse a SUBSCRIBE: a bus can join the collectors' shared",
    "# subscription (docs/deployment.md); frota provision dynsec DIR closes that.",
)


def dynsec_lines(folder: Path, plugin: Path | str) -> list[str]:
    """The lines that load the dynamic security plugin on the file in ``folder``."""
    return [f"plugin {plugin}", f"plugin_opt_config_file {folder / 'dynamic-security.json'}"]


def conf_with_dynsec(text: str, folder: Path, plugin: Path | str) -> str:
    """``mosquitto.conf``'s ``text`` with its ``password_file`` line replaced by the plugin's and
    its ``acl_file`` line removed (any other line kept); BrokerFileError without them."""
    out: list[str] = list(DYNSEC_HEADER)
    found = False
    for line in text.splitlines():
        key = line.split(maxsplit=1)[0] if line.strip() else ""
        if line in FILES_HEADER or key == "acl_file":
            continue
        if key == "password_file":
            out += dynsec_lines(folder, plugin)
            found = True
        elif key in ("plugin", "plugin_opt_config_file", "auth_plugin"):
            raise BrokerFileError(f"mosquitto.conf already loads a plugin: {line!r}")
        else:
            out.append(line)
    if not found:
        raise BrokerFileError("mosquitto.conf has no password_file line to replace")
    return "\n".join(out) + "\n"


def conf_text(
    folder: Path,
    ca_file: Path,
    *,
    port: int,
    bind: str,
    user: str,
    persistence: bool = True,
    dynsec_plugin: Path | None = None,
) -> str:
    """``mosquitto.conf``: one TLS listener, no anonymous access, client ids forced to the
    username (a client cannot take over another's session); logins and ACLs from the dynamic
    security plugin's file (``dynsec_plugin``: checks SUBSCRIBE too), else the password file and
    ACL file (which cannot refuse a SUBSCRIBE)."""
    if dynsec_plugin is not None:
        access = [*DYNSEC_HEADER, f"user {user}", "per_listener_settings false",
                  "allow_anonymous false", *dynsec_lines(folder, dynsec_plugin)]
    else:
        access = [*FILES_HEADER, f"user {user}", "per_listener_settings false",
                  "allow_anonymous false", f"password_file {folder / 'passwd'}",
                  f"acl_file {folder / 'acl'}"]
    lines = [
        *access,
        f"persistence {'true' if persistence else 'false'}",
        f"persistence_location {folder / 'data'}/",
        "max_queued_messages 100000",
        "log_dest stderr",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "",
        f"listener {port} {bind}",
        "use_username_as_clientid true",
        f"cafile {ca_file}",
        f"certfile {folder / 'server.crt'}",
        f"keyfile {folder / 'server.key'}",
        "tls_version tlsv1.2",
        "",
    ]
    return "\n".join(lines)


def give_to_broker(user: str, paths: Iterable[Path]) -> bool:
    """Make the broker's files owned by its user (as root, when the user exists); True if done.

    Mosquitto 2 drops privileges to ``user`` before reading its password file, ACL and keys."""
    if os.geteuid() != 0:
        return False
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return False
    for path in paths:
        if path.exists():
            os.chown(path, entry.pw_uid, entry.pw_gid)
    return True
