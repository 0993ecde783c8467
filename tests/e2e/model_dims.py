"""The --dim bindings of a list that name a symbolic dim of a model's inputs
(orrery refuses one that names none: it would leave the model at its
exported size)."""
import re
import subprocess


def bindable(orrery, model, candidates):
    """`candidates` ("NAME=VALUE") whose NAME is an unbound symbolic dim of
    `model`, as `orrery stats` names them."""
    p = subprocess.run([orrery, "stats", model], capture_output=True, text=True)
    names = set(re.findall(r"(\S+) in '[^']*' dim \d+", p.stderr))
    return [d for d in candidates if d.split("=", 1)[0] in names]
