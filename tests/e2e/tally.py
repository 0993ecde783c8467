"""Shared reporting for the end-to-end checks: one line per model, then the
'N passed, N failed' line CI reads."""


class Tally:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def record(self, name, problems, detail):
        """Prints `name` as ok (with `detail`) or FAIL (with its problems)."""
        status = "FAIL" if problems else "ok"
        print(f"{status:4} {name}: {'; '.join(problems) if problems else detail}")
        self.failed += bool(problems)
        self.passed += not problems

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0
