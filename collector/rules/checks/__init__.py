"""The rules, one module each: every module here that defines ``RULE`` (a class following
``collector.rules.rule.Rule``) is in the pipeline (``collector/rules/pipeline.py``). See
docs/rules.md, "How to add a rule"."""
