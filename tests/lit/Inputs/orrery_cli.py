"""What the lit helper scripts share: one simulated step as JSON, and ok /
WRONG lines that decide the exit status."""
import json, subprocess


def simulate(orrery, model, cluster, strategy, *extra):
    out = subprocess.run([orrery, "simulate", model, "--cluster", cluster, "--strategy", strategy,
                          "--json", *extra], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


class Checks:
    def __init__(self):
        self.bad = False

    def __call__(self, ok, what):
        self.bad |= not ok
        print(("ok    " if ok else "WRONG ") + what)
