#!/usr/bin/env bash
# The whole test suite: installs what is missing, then lint (ruff), types (mypy --strict), pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k registrador).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
echo "== ruff" >&2
ruff check .
echo "== mypy --strict" >&2
mypy
echo "== pytest" >&2
set +e
python -m pytest "$@"
status=$?
set -e
# pytest exits 5 when it collected no test: that is a failure of the suite, not a pass.
exit "$status"
