#!/usr/bin/env bash
# The demo of Frota's main job: installs what is missing, then runs `frota demo`.
# Extra arguments go to `frota demo` (see `frota demo --help`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
exec frota demo "$@"
