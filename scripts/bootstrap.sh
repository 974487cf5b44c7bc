#!/usr/bin/env bash
# Installs what Frota needs and is missing, then returns: Debian's python3-venv, mosquitto,
# mosquitto-clients, chromium and chromium-driver (the pages' browser tests); a virtualenv in .venv with the pyproject.toml packages (dev extras included).
# Sourced by scripts/demo.sh and scripts/test.sh; safe to run again (it only installs what is missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "bootstrap: need root (or sudo) to run: $*" >&2; return 1; fi
}

missing=()
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
{ command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ]; } || missing+=(mosquitto)
command -v mosquitto_pub >/dev/null || missing+=(mosquitto-clients)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "bootstrap: installing Debian packages: ${missing[*]}" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >&2
fi

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating the virtualenv in .venv" >&2
    python3 -m venv .venv
fi
stamp=.venv/.frota-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "bootstrap: installing Frota and its packages into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >&2
    .venv/bin/python -m pip install -q -e '.[dev]' >&2
    touch "$stamp"
fi
export PATH="$root/.venv/bin:$PATH:/usr/sbin"
