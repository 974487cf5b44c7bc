"""The rules engine (docs/rules.md): records + fleet registry + state profiles → findings."""

from collector.rules.engine import Engine, LateRecordError, evaluate
from collector.rules.profile import Profile, ProfileError, load_profiles

__all__ = ["Engine", "LateRecordError", "Profile", "ProfileError", "evaluate", "load_profiles"]
