"""Copies a plan with strategy fields set: edit_plan.py IN OUT KEY=VALUE...
(VALUE as JSON; a bare word is a string). The derived micro_batches is
dropped unless it is one of the edits."""
import json
import sys

plan = json.load(open(sys.argv[1]))
plan["strategy"].pop("micro_batches", None)
for item in sys.argv[3:]:
    key, value = item.split("=", 1)
    try:
        plan["strategy"][key] = json.loads(value)
    except json.JSONDecodeError:
        plan["strategy"][key] = value
json.dump(plan, open(sys.argv[2], "w"))
