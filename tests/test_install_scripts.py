"""The install scripts parse and answer --help (the install itself is checked on a fresh Debian 12
root by `bash scripts/check-install.sh`, on demand: minutes, too long for the suite)."""

from __future__ import annotations

import subprocess

import pytest

from tests.services import PROJECT

SCRIPTS = ["install-agent.sh", "check-install.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_parses(script: str) -> None:
    result = subprocess.run(["bash", "-n", str(PROJECT / "scripts" / script)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_install_agent_help_and_a_bad_argument() -> None:
    script = str(PROJECT / "scripts" / "install-agent.sh")
    helped = subprocess.run(["bash", script, "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0
    assert "--wheelhouse DIR" in helped.stdout
    bad = subprocess.run(["bash", script, "--bogus"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[-1] == "install-agent: error: unknown argument: --bogus"
