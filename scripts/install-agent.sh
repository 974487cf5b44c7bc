#!/usr/bin/env bash
# Install the Frota agent on Debian 12 / Raspberry Pi OS Lite (bookworm), as root:
#   a system user `frota` (in group dialout, for the serial adapters), the code in /opt/frota with
#   its own virtualenv, /etc/frota (root-owned, readable by group frota, not writable by it) with
#   the example configuration, the udev rules for stable device names, the hardened systemd unit
#   (enabled, not started: edit the configuration first). Safe to run again (an upgrade): it never
#   overwrites /etc/frota/agent.toml or an edited udev rules file.
# Checked on a fresh Debian 12 root by scripts/check-install.sh (amd64; arm64 is untested).
# Guide: firmware-notes/raspberry-pi.md.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: install-agent.sh [--source DIR] [--wheelhouse DIR] [--no-apt] [--now]

  --source DIR      the Frota checkout to install (default: the one holding this script)
  --wheelhouse DIR  install Python packages only from the wheels in DIR (no network; make it
                    with `pip download --dest DIR /path/to/frota setuptools wheel`)
  --no-apt          do not apt-get install python3-venv, systemd and udev (already there)
  --now             also start the agent (only once /etc/frota/agent.toml is edited)
EOF
}

die() { echo "install-agent: error: $*" >&2; exit 1; }
say() { echo "install-agent: $*"; }

SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEELHOUSE=""
APT=1
NOW=0
while [ $# -gt 0 ]; do
    case "$1" in
        --source) [ $# -ge 2 ] || die "--source needs a directory"; SOURCE="$2"; shift 2 ;;
        --wheelhouse) [ $# -ge 2 ] || die "--wheelhouse needs a directory"; WHEELHOUSE="$2"; shift 2 ;;
        --no-apt) APT=0; shift ;;
        --now) NOW=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

PREFIX=/opt/frota
CONF=/etc/frota
STATE=/var/lib/frota
UNIT=/etc/systemd/system/frota-agent.service
RULES=/etc/udev/rules.d/99-frota-serial.rules

[ "$(id -u)" -eq 0 ] || die "run as root (sudo bash scripts/install-agent.sh)"
[ -f "$SOURCE/pyproject.toml" ] && [ -d "$SOURCE/agent" ] || die "$SOURCE is not a Frota checkout"
if [ -r /etc/os-release ]; then
    . /etc/os-release
    [ "${VERSION_ID:-}" = "12" ] || say "warning: made for Debian 12 (bookworm); this is ${PRETTY_NAME:-unknown}"
fi

# 1. Debian packages: Python 3.11 with venv; systemd and udev are on every Raspberry Pi OS.
if [ "$APT" -eq 1 ]; then
    need=()
    for pkg in python3 python3-venv systemd udev; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        say "apt-get install ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    fi
fi
command -v python3 >/dev/null || die "python3 is missing (apt-get install python3 python3-venv)"

# 2. The system user: no login, no home of its own; dialout for the serial adapters (udev rules).
getent group dialout >/dev/null || groupadd --system dialout
getent group frota >/dev/null || groupadd --system frota
if ! id -u frota >/dev/null 2>&1; then
    useradd --system --gid frota --groups dialout --home-dir "$STATE" --no-create-home \
        --shell /usr/sbin/nologin --comment "Frota on-bus agent" frota
    say "created system user frota"
fi
id -nG frota | tr ' ' '\n' | grep -qx dialout || usermod -a -G dialout frota

# 3. The code, owned by root (the agent cannot change what it runs), and its virtualenv.
install -d -m 0755 -o root -g root "$PREFIX"
if [ "$(cd "$SOURCE" && pwd -P)" != "$(cd "$PREFIX" && pwd -P)" ]; then
    tar -C "$SOURCE" --exclude=./.venv --exclude=./.git --exclude=./var --exclude='*.egg-info' \
        --exclude=__pycache__ --exclude=.mypy_cache --exclude=.pytest_cache --exclude=.ruff_cache \
        --exclude=./build --no-same-owner -cf - . | tar -C "$PREFIX" --no-same-owner -xf -
fi
chown -R root:root "$PREFIX"
chmod -R go-w "$PREFIX"
[ -x "$PREFIX/.venv/bin/python" ] || python3 -m venv "$PREFIX/.venv"
pip=("$PREFIX/.venv/bin/pip" install --quiet --disable-pip-version-check --no-warn-script-location)
if [ -n "$WHEELHOUSE" ]; then
    pip+=(--no-index --find-links "$WHEELHOUSE")
fi
say "installing Frota into $PREFIX/.venv"
# A non-editable install: the wheel's copy runs, not the tree, so an upgrade is this script again.
"${pip[@]}" --upgrade "$PREFIX" >/dev/null
chmod -R go-w "$PREFIX/.venv"
"$PREFIX/.venv/bin/frota" --version >/dev/null || die "the installed frota command does not run"

# 4. Configuration: root owns it, the agent's group reads it; secrets are the operator's to add
#    (owned by frota, mode 0600 or 0400: the agent refuses anything looser at start).
install -d -m 0750 -o root -g frota "$CONF"
chown root:frota "$CONF"
chmod 0750 "$CONF"
if [ -e "$CONF/agent.toml" ]; then
    say "kept $CONF/agent.toml (already there)"
else
    install -m 0640 -o root -g frota "$SOURCE/firmware-notes/agent.example.toml" "$CONF/agent.toml"
    say "installed $CONF/agent.toml from agent.example.toml: edit it (vehicle, broker, devices)"
fi

# 5. The state directory (systemd's StateDirectory= makes it too; this lets `frota agent status`
#    run as the frota user before the first start).
install -d -m 0750 -o frota -g frota "$STATE"

# 6. udev rules: stable names /dev/frota/{registrador,gps,apc}; edit the serial numbers to yours.
install -d -m 0755 /etc/udev/rules.d
if [ -e "$RULES" ]; then
    say "kept $RULES (already there)"
else
    install -m 0644 "$SOURCE/firmware-notes/udev/99-frota-serial.rules" "$RULES"
    say "installed $RULES: put your adapters' serial numbers in it"
fi
if [ -d /run/udev ] && command -v udevadm >/dev/null; then
    udevadm control --reload || true
    udevadm trigger --subsystem-match=tty || true
fi

# 7. The systemd unit (always the shipped one: it is code), enabled for the next boot.
install -m 0644 "$SOURCE/firmware-notes/systemd/frota-agent.service" "$UNIT"
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
systemctl enable frota-agent.service >/dev/null 2>&1 || die "systemctl enable frota-agent.service failed"
if [ "$NOW" -eq 1 ]; then
    [ -d /run/systemd/system ] || die "--now: systemd is not running here"
    systemctl restart frota-agent.service
fi

say "done. Next: edit $CONF/agent.toml (and add its secret files, owned by frota, mode 0600),"
say "  put your adapters in $RULES, then: systemctl start frota-agent; journalctl -u frota-agent -f"
