"""The rule seam: a rule is one module (plus its profile sections); profiles are open to operators.

The toy rule below reaches ``frota check`` through the seam alone: one module, made known the
way any installed package makes a rule known (a ``frota.rules`` entry point), and its section in
an operator's copy of SP. Nothing of Frota is edited.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.registry import Registry, RegistryError
from collector.rules import profile as profile_module
from collector.rules.pipeline import RULE_PARAMS, RULES, implemented_rules
from collector.rules.profile import ProfileError, builtin, builtin_names, load_profiles
from tests.collector.rules.timeline import REGISTRY_DOC, Timeline
from tests.services import PROJECT

DATA = Path(__file__).parent / "data"
SP_TEXT = (profile_module.PROFILE_DIR / "SP.toml").read_text()

TOY = '''
"""A toy rule: every door opened is reported (one module, nothing else)."""

from dataclasses import dataclass

from collector.rules.finding import build
from collector.rules.rule import RuleBase


@dataclass(frozen=True)
class ToyParams:
    min_door: int = 1


class DoorOpened(RuleBase):
    params = (("toy.door_opened", ToyParams),)
    order = 500

    def on_record(self, v, ms, rec):
        if rec["kind"] != "door" or not rec.get("open"):
            return None
        vehicle, trip, line, profile = v.context()
        cfg = profile.rules["toy.door_opened"]
        if rec["door"] < cfg.params.min_door:
            return None
        return build(cfg, profile, subject=f"{vehicle}:{rec['door']}", vehicle=vehicle,
                     driver=None, trip=trip, line=line, start_ms=ms, end_ms=ms,
                     details={"door": rec["door"]})


RULE = DoorOpened
'''
SECTION = '''
[rules."toy.door_opened"]
applies = true
severity = "report"
basis = ["CTB art. 105 II"]
min_door = 2
'''


def test_the_pipeline_is_found_in_the_checks_folder() -> None:
    modules = {rule.__module__.rsplit(".", 1)[1] for rule in RULES}
    assert {"speed", "unidentified", "two_drivers", "driver_time", "operations",
            "retention"} <= modules
    assert "retention.minimum" in RULE_PARAMS
    assert "retention.minimum" not in implemented_rules()   # evaluated by the store
    assert [r.order for r in RULES] == sorted(r.order for r in RULES)


def test_a_toy_rule_runs_end_to_end_through_the_seam_alone(tmp_path: Path) -> None:
    (tmp_path / "toy_rule.py").write_text(TOY)
    dist = tmp_path / "toy_rule-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-rule\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[frota.rules]\ntoy = toy_rule\n")
    profile = tmp_path / "sp-with-toy.toml"
    profile.write_text(SP_TEXT + SECTION)
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(REGISTRY_DOC))
    tl = Timeline()
    for door, at in ((1, 60_000), (2, 120_000)):
        tl.add("door", "V1", at, door=door, open=True, boarded=0, alighted=0)
        tl.add("door", "V1", at + 30_000, door=door, open=False, boarded=0, alighted=0)
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in tl.records))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(PROJECT)])}
    done = subprocess.run([sys.executable, "-m", "frota", "check", "--registry", str(registry),
                           "--profile", str(profile), str(records)],
                          capture_output=True, text=True, check=False, cwd=PROJECT, env=env)
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in done.stdout.splitlines()]
    # min_door = 2 in the profile: door 1 opening at +1 min is not reported, door 2 at +2 min is
    toy = [f for f in found if f["rule"] == "toy.door_opened"]
    assert [(f["start"], f["details"], f["basis"]) for f in toy] == [
        (tl.ts(120_000), {"door": 2}, ["CTB art. 105 II"])]
    assert done.stderr == ""


def test_a_rule_no_profile_knows_is_off() -> None:
    # the built-in profiles have no section for a plug-in's rule: it does not apply there
    for name in builtin_names():
        assert set(builtin(name).rules) == set(RULE_PARAMS)


def test_the_builtin_files_state_every_rule_explicitly() -> None:
    import tomllib

    for name in builtin_names():
        with (profile_module.PROFILE_DIR / f"{name}.toml").open("rb") as handle:
            assert set(tomllib.load(handle)["rules"]) == set(RULE_PARAMS), name


def test_a_copy_from_before_the_pipeline_still_loads(caplog: pytest.LogCaptureFixture) -> None:
    path = str(DATA / "sp-copy-2026-11.toml")
    with caplog.at_level(logging.WARNING):
        profiles = load_profiles([path])
    assert profiles["SP"].source == path
    assert profiles["SP"].rule("driver.workday").params.overtime_h == 4.0
    assert set(profiles["SP"].rules) == set(RULE_PARAMS)
    # the rules added since (issue 13) come from the built-in SP, named in one warning; the
    # keys added to sections the copy has (warn_before_min) come from it silently
    (warning,) = [r.getMessage() for r in caplog.records if "no section" in r.getMessage()]
    for rule in ("schedule.trip_not_run", "schedule.service_level",
                 "fleet.inspection_expired", "fleet.age"):
        assert repr(rule) in warning
    assert profiles["SP"].rule("schedule.trip_not_run") == builtin("SP").rule(
        "schedule.trip_not_run")
    assert profiles["SP"].rule("driver.workday").params.warn_before_min == 30.0


def without(text: str, rule: str) -> str:
    """A profile's text without the section of one rule."""
    start = text.index(f'[rules."{rule}"]')
    end = text.find("[rules.", start + 1)
    return text[:start] + (text[end:] if end >= 0 else "")


def test_a_copy_missing_sections_gets_the_builtin_ones_with_a_warning(tmp_path: Path) -> None:
    text = without(without(SP_TEXT, "occupancy.index"), "driver.two_drivers")
    path = tmp_path / "old.toml"
    path.write_text(text.replace("overtime_h = 2.0", "overtime_h = 4.0"))
    said: list[str] = []
    sp = load_profiles([str(path)], warn=said.append)["SP"]
    assert said == [f"{path}: no section for 'driver.two_drivers', 'occupancy.index': "
                    "the built-in SP's used"]
    assert sp.rule("occupancy.index") == builtin("SP").rule("occupancy.index")
    assert sp.rule("driver.workday").params.overtime_h == 4.0


def test_frota_check_warns_about_missing_sections(tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text(without(SP_TEXT, "occupancy.index"))
    registry = tmp_path / "fleet.json"
    registry.write_text(json.dumps(REGISTRY_DOC))
    done = subprocess.run([sys.executable, "-m", "frota", "check", "--registry", str(registry),
                           "--profile", str(path)], input="", capture_output=True, text=True,
                          check=False, cwd=PROJECT)
    assert done.returncode == 0
    assert done.stderr == (f"frota check: warning: {path}: no section for 'occupancy.index': "
                           "the built-in SP's used\n")


def test_a_copy_under_a_new_name_extends_a_builtin(tmp_path: Path) -> None:
    path = tmp_path / "acme.toml"
    path.write_text('name = "SP-ACME"\nextends = "SP"\ntitle = "SP with ACME policy"\n'
                    '[rules."driver.workday"]\novertime_h = 4.0\n')
    profiles = load_profiles([str(path)])
    acme, sp = profiles["SP-ACME"], profiles["SP"]
    assert sp.source != str(path)
    assert acme.title == "SP with ACME policy"
    assert acme.timezone == sp.timezone
    assert acme.periods == sp.periods
    assert acme.rule("driver.workday").params.overtime_h == 4.0
    assert acme.rule("driver.workday").basis == sp.rule("driver.workday").basis
    assert acme.rule("speed.over_limit") == sp.rule("speed.over_limit")
    # a registry may name the copy once it is loaded
    doc = {"lines": [{"id": "L", "profile": "SP-ACME", "service": "rodoviario",
                      "length_km": 10}]}
    assert Registry.from_dict(doc, profiles).lines["L"].profile == "SP-ACME"
    with pytest.raises(RegistryError, match="profile 'SP-ACME' is not one of SP, BA, TO"):
        Registry.from_dict(doc)


@pytest.mark.parametrize(("text", "message"), [
    ('name = "RJ"\nextends = "RJ"\n', "extends 'RJ': not a built-in profile (SP, BA, TO)"),
    ('name = "RJ"\n', "name 'RJ' is not a built-in profile (SP, BA, TO); a copy under a new "
                      'name says which one it extends: extends = "SP"'),
    ('name = "X"\nextends = "SP"\n[rules."driver.workday"]\novertime = 4\n',
     "unknown parameter 'overtime'"),
])
def test_bad_extends(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_profiles([str(path)])


def test_builtin_profiles_are_the_files_of_the_folder(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SP", "BA", "TO"):
        (tmp_path / f"{name}.toml").write_text(
            (profile_module.PROFILE_DIR / f"{name}.toml").read_text())
    (tmp_path / "RJ.toml").write_text(SP_TEXT.replace('name = "SP"', 'name = "RJ"'))
    monkeypatch.setattr(profile_module, "PROFILE_DIR", tmp_path)
    assert builtin_names() == ("SP", "BA", "RJ", "TO")    # the default first, then by name
    assert load_profiles()["RJ"].name == "RJ"
    doc = {"lines": [{"id": "L", "profile": "RJ", "service": "rodoviario", "length_km": 10}]}
    assert Registry.from_dict(doc).lines["L"].profile == "RJ"
