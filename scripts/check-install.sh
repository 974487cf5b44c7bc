#!/usr/bin/env bash
# Check scripts/install-agent.sh on a fresh Debian 12 root (issue 14): a cached minbase chroot made
# with debootstrap (this machine has no container engine), the install script run inside it, then
# the result checked: the user and its groups, who may write what, the configuration as the agent
# reads it, the udev rules, the unit (`systemd-analyze verify --root`, `security`), a second run
# that keeps the configuration, and the installed agent running as user frota in the chroot,
# reading a simulated GPS on a pty and reaching a Mosquitto broker.
# Run on demand, as root (minutes, too long for the test suite):  bash scripts/check-install.sh
# amd64 only (the host's architecture); arm64 (a Raspberry Pi) is untested.
# Environment: FROTA_CHECK_CACHE (default /var/cache/frota-check-install) holds the chroot tarball
# and a wheelhouse; FROTA_CHECK_KEEP=1 keeps the root afterwards; FROTA_CHECK_MIRROR overrides the
# Debian mirror (default: the host's, from /etc/apt/sources.list*).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${FROTA_CHECK_CACHE:-/var/cache/frota-check-install}"
ARCH="$(dpkg --print-architecture)"
TARBALL="$CACHE/bookworm-minbase-$ARCH.tar"
ROOT=""
MOUNTED=()
BROKER_PID=""
agent_pid=""
gps_pid=""
PASSED=0
FAILED=0

die() { echo "check-install: error: $*" >&2; exit 1; }
ok() { PASSED=$((PASSED + 1)); echo "ok   $*"; }
bad() { FAILED=$((FAILED + 1)); echo "FAIL $*"; }
check() { local what="$1"; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }
fails() { local what="$1"; shift; if "$@" >/dev/null 2>&1; then bad "$what"; else ok "$what"; fi; }
# Commands in the chroot as root, and as the unit runs the agent: user frota, its group and its
# supplementary groups from the chroot's /etc/group. Arrays, so `"${AS_FROTA[@]}" cmd &` gives
# the command's own pid (a function run with & would give a subshell's).
IN_ROOT=()
AS_FROTA=()
in_root() { "${IN_ROOT[@]}" "$@"; }
as_frota() { "${AS_FROTA[@]}" "$@"; }
mode_of() { in_root stat -c '%U:%G %a' "$1"; }

cleanup() {
    local pid
    for pid in "$agent_pid" "$gps_pid" "$BROKER_PID"; do
        [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    done
    local i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTED[$i]}" 2>/dev/null || true; done
    if [ -n "$ROOT" ] && [ "${FROTA_CHECK_KEEP:-0}" != 1 ]; then rm -rf --one-file-system "$ROOT"; fi
    [ -n "$ROOT" ] && [ "${FROTA_CHECK_KEEP:-0}" = 1 ] && echo "check-install: root kept at $ROOT"
    return 0
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || die "run as root (it makes a chroot)"
[ "$ARCH" = amd64 ] || echo "check-install: warning: only amd64 has been checked; this is $ARCH"
command -v systemd-analyze >/dev/null || die "systemd-analyze is missing (apt-get install systemd)"
if ! command -v debootstrap >/dev/null; then
    apt-get install -y -qq debootstrap >/dev/null || die "cannot install debootstrap"
fi

# 1. The cached fresh root: Debian 12 minbase, made once.
mirror() {
    if [ -n "${FROTA_CHECK_MIRROR:-}" ]; then echo "$FROTA_CHECK_MIRROR"; return; fi
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
        2>/dev/null | grep -v '^\s*#' | grep -oE 'https?://[^ ]+' | grep -v security | head -n 1
}
mkdir -p "$CACHE"
if [ ! -f "$TARBALL" ]; then
    MIRROR="$(mirror)"
    [ -n "$MIRROR" ] || die "no Debian mirror in /etc/apt/sources.list*; set FROTA_CHECK_MIRROR"
    echo "check-install: debootstrap --variant=minbase bookworm from $MIRROR (once; cached in $CACHE)"
    rm -rf "$CACHE/build"
    debootstrap --variant=minbase bookworm "$CACHE/build" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
        || die "debootstrap failed; see $CACHE/debootstrap.log"
    tar -C "$CACHE/build" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$CACHE/build"
fi
ROOT="$(mktemp -d /var/tmp/frota-check-install.XXXXXX)"
IN_ROOT=(chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8)
AS_FROTA=(chroot "$ROOT" /usr/bin/setpriv --reuid=frota --regid=frota --init-groups
    /usr/bin/env -i PATH=/usr/bin:/bin HOME=/var/lib/frota LANG=C.UTF-8)
tar -C "$ROOT" -xf "$TARBALL"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
mount -t proc proc "$ROOT/proc" && MOUNTED+=("$ROOT/proc")
mount --bind /dev "$ROOT/dev" && MOUNTED+=("$ROOT/dev")
mount --bind /dev/pts "$ROOT/dev/pts" && MOUNTED+=("$ROOT/dev/pts")
# Python packages come from a wheelhouse made here with the host's pip (as for a bus with no
# network: install-agent.sh --wheelhouse); the chroot gets no pip index settings of the host's.
HOST_PIP="$REPO/.venv/bin/pip"
[ -x "$HOST_PIP" ] || HOST_PIP="python3 -m pip"
mkdir -p "$CACHE/wheels"
$HOST_PIP wheel --quiet --wheel-dir "$CACHE/wheels" "$REPO" >"$CACHE/wheels.log" 2>&1 \
    && $HOST_PIP download --quiet --dest "$CACHE/wheels" "setuptools>=77" wheel >>"$CACHE/wheels.log" 2>&1 \
    || die "cannot make the wheelhouse; see $CACHE/wheels.log"
rm -f "$CACHE"/wheels/frota-*.whl  # the install builds Frota itself from the copied tree
mkdir -p "$ROOT/root/wheelhouse"
mount --bind "$CACHE/wheels" "$ROOT/root/wheelhouse" && MOUNTED+=("$ROOT/root/wheelhouse")
echo "check-install: fresh Debian 12 root at $ROOT ($(cat "$ROOT/etc/debian_version"), $ARCH)"
fails "the fresh root has no python3 yet" test -e "$ROOT/usr/bin/python3"

# 2. The checkout as it is (committed or not), copied in, and the install script run there.
mkdir -p "$ROOT/root/frota-src"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) \
    | tar -C "$ROOT/root/frota-src" -xf -
started=$(date +%s)
if in_root bash /root/frota-src/scripts/install-agent.sh --source /root/frota-src --wheelhouse /root/wheelhouse >"$ROOT/install.log" 2>&1; then
    ok "install-agent.sh ran in the chroot ($(($(date +%s) - started)) s)"
else
    bad "install-agent.sh failed in the chroot:"; tail -n 20 "$ROOT/install.log"; exit 1
fi

# 3. The user, the files, who may write what.
uid="$(in_root id -u frota)"
check "user frota exists as a system user (uid $uid < 1000)" test "$uid" -lt 1000
check "frota is in group dialout (the udev rules' group)" sh -c "chroot '$ROOT' id -nG frota | tr ' ' '\n' | grep -qx dialout"
check "frota has no login shell" sh -c "chroot '$ROOT' getent passwd frota | grep -q ':/usr/sbin/nologin$'"
check "the installed command runs as frota" as_frota /opt/frota/.venv/bin/frota --version
check "/etc/frota is root:frota 0750" test "$(mode_of /etc/frota)" = "root:frota 750"
check "/etc/frota/agent.toml is root:frota 0640" test "$(mode_of /etc/frota/agent.toml)" = "root:frota 640"
check "frota can read its configuration" as_frota test -r /etc/frota/agent.toml
fails "frota cannot write in /etc/frota" as_frota touch /etc/frota/new-file
fails "frota cannot change /etc/frota/agent.toml" as_frota sh -c 'echo x >> /etc/frota/agent.toml'
fails "frota cannot change the code it runs" as_frota touch /opt/frota/.venv/bin/frota
fails "frota cannot add to its virtualenv" as_frota touch /opt/frota/.venv/lib/new-file
check "/var/lib/frota is frota:frota 0750" test "$(mode_of /var/lib/frota)" = "frota:frota 750"
check "udev rules installed" cmp "$REPO/firmware-notes/udev/99-frota-serial.rules" "$ROOT/etc/udev/rules.d/99-frota-serial.rules"
check "the unit is installed" cmp "$REPO/firmware-notes/systemd/frota-agent.service" "$ROOT/etc/systemd/system/frota-agent.service"
check "the unit is enabled (multi-user.target.wants)" test -L "$ROOT/etc/systemd/system/multi-user.target.wants/frota-agent.service"

# 4. The unit, checked against the installed root.
if verify="$(systemd-analyze verify --root="$ROOT" --man=no frota-agent.service 2>&1)" \
    && ! grep -q frota-agent <<<"$verify"; then
    ok "systemd-analyze verify --root passes"
else
    bad "systemd-analyze verify --root: $verify"
fi
score_line="$(systemd-analyze security --root="$ROOT" --offline=true frota-agent.service 2>&1 | tail -n 1)"
score="$(grep -oE '[0-9]+\.[0-9]+' <<<"$score_line" | head -n 1)"
check "systemd-analyze security: $score (target <= 3.0)" awk -v s="${score:-99}" 'BEGIN { exit !(s <= 3.0) }'

# 5. The agent as the unit runs it: the example configuration is read and refused in one line
#    (its secret files are the operator's to add); a loose secret is refused.
out="$(as_frota /opt/frota/.venv/bin/frota agent run --config /etc/frota/agent.toml 2>&1)" && rc=0 || rc=$?
check "the example config is read as frota and refused in one line: $out" \
    test "$rc" = 1 -a "$(wc -l <<<"$out")" = 1 -a -n "$(grep 'no such file' <<<"$out")"

# 6. Running it: a GPS on a pty (the installed simulator), a Mosquitto broker on the host.
if command -v mosquitto >/dev/null; then
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" >"$ROOT/mosquitto.conf"
    mosquitto -c "$ROOT/mosquitto.conf" >"$ROOT/mosquitto.log" 2>&1 &
    BROKER_PID=$!
    install -m 0640 -o root -g "$(in_root getent group frota | cut -d: -f3)" /dev/null "$ROOT/etc/frota/check.toml"
    cat >"$ROOT/etc/frota/check.toml" <<EOF
vehicle = "CHK0001"
[buffer]
path = "/var/lib/frota/buffer.sqlite"
[broker]
url = "mqtt://127.0.0.1:$port"
password_file = "/etc/frota/check-password"
[[devices]]
name = "gps"
protocol = "nmea"
port = "/run/frota-check-gps"
baudrate = 9600
EOF
    in_root sh -c 'echo s3cret > /etc/frota/check-password && chown frota:frota /etc/frota/check-password && chmod 0644 /etc/frota/check-password'
    out="$(as_frota /opt/frota/.venv/bin/frota agent run --config /etc/frota/check.toml 2>&1)" && rc=0 || rc=$?
    check "a secret file open to others (0644) is refused: $out" test "$rc" = 1 -a -n "$(grep '0600 or 0400' <<<"$out")"
    in_root chmod 0400 /etc/frota/check-password
    "${IN_ROOT[@]}" /opt/frota/.venv/bin/frota sim gps --link /run/frota-check-gps --time-scale 10 >"$ROOT/gps.log" 2>&1 &
    gps_pid=$!
    for _ in $(seq 50); do [ -e "$ROOT/run/frota-check-gps" ] && break; sleep 0.1; done
    # The pty belongs to root: give it to dialout as udev gives the adapters (MODE 0660).
    tty="$(readlink "$ROOT/run/frota-check-gps")"
    chgrp "$(in_root getent group dialout | cut -d: -f3)" "$tty" && chmod 0660 "$tty"
    "${AS_FROTA[@]}" /opt/frota/.venv/bin/frota agent run --config /etc/frota/check.toml >"$ROOT/agent.log" 2>&1 &
    agent_pid=$!
    sleep 4
    # A capture through the running agent (root asks the frota agent over its socket).
    out="$(in_root /opt/frota/.venv/bin/frota agent capture --config /etc/frota/check.toml --device gps --seconds 2 --out /root/gps.hex 2>&1)" || true
    check "frota agent capture goes through the running agent: $out" grep -q "through the running agent" <<<"$out"
    check "and the capture decodes to positions" sh -c "chroot '$ROOT' /opt/frota/.venv/bin/frota decode --protocol nmea --hex /root/gps.hex 2>/dev/null | grep -q '\"kind\":\"position\"'"
    sleep 2
    kill -TERM "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" && rc=0 || rc=$?
    kill -TERM "$gps_pid" 2>/dev/null || true
    wait "$gps_pid" 2>/dev/null || true
    check "the agent ran as frota and stopped cleanly on SIGTERM (exit $rc)" test "$rc" = 0
    check "it read the GPS through the dialout group" grep -q "gps=ok" "$ROOT/agent.log"
    check "it reached the broker" grep -qE "broker=up|connected to" "$ROOT/agent.log"
    status="$(as_frota /opt/frota/.venv/bin/frota agent status --config /etc/frota/check.toml --json 2>&1 || true)"
    check "GPS records are in its buffer (frota agent status as frota)" python3 -c '
import json, sys
s = json.loads(sys.argv[1])
gps = [d for d in s["devices"] if d["name"] == "gps"][0]
sys.exit(0 if s["last_seq"] > 3 and gps["last_record_s_ago"] is not None else 1)' "$status"
    kill "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
    BROKER_PID=""
    rm -f "$ROOT/etc/frota/check.toml" "$ROOT/etc/frota/check-password"
else
    echo "check-install: mosquitto is not installed; the agent was not run (bash scripts/bootstrap.sh installs it)"
fi

# 7. Again (an upgrade): the configuration is kept, nothing fails.
echo "# edited by the operator" >>"$ROOT/etc/frota/agent.toml"
if in_root bash /root/frota-src/scripts/install-agent.sh --source /root/frota-src --wheelhouse /root/wheelhouse >"$ROOT/install2.log" 2>&1; then
    ok "install-agent.sh runs again (an upgrade)"
else
    bad "install-agent.sh failed on its second run"; tail -n 20 "$ROOT/install2.log"
fi
check "the second run kept the edited agent.toml" grep -q "edited by the operator" "$ROOT/etc/frota/agent.toml"
check "and its modes" test "$(mode_of /etc/frota/agent.toml)" = "root:frota 640"

echo "check-install: $PASSED passed, $FAILED failed (Debian $(cat "$ROOT/etc/debian_version") minbase, $ARCH; arm64 untested)"
[ "$FAILED" -eq 0 ]
