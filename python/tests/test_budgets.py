"""One name per budget (issue 45) through the Python package's local backend: the activation budget in
bytes or as a percentage of the plain step's activation peak, and the deprecated JSON names."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from edgecost import cli  # noqa: E402
from edgecost.cli import _budget_flags  # noqa: E402


class BudgetFlagsTest(unittest.TestCase):
    def test_each_budget_maps_to_its_flag(self):
        self.assertEqual(_budget_flags({"activationBudgetPercent": 50}), ["--activation-budget", "50%"])
        self.assertEqual(_budget_flags({"activationBudgetBytes": "9000000"}), ["--activation-budget", "9000000B"])
        self.assertEqual(_budget_flags({"processRamBudgetBytes": "60000000"}), ["--ram-budget", "60000000B"])
        self.assertEqual(_budget_flags({"minRam": True}), ["--min-ram"])
        # The names before issue 45: ramBudgetBytes was the activation budget, deviceRamBytes the RAM budget.
        self.assertEqual(_budget_flags({"ramBudgetBytes": "7"}), ["--activation-budget", "7B"])
        self.assertEqual(_budget_flags({"deviceRamBytes": "8"}), ["--ram-budget", "8B"])
        with self.assertRaisesRegex(ValueError, "no budget"):
            _budget_flags({"model": "linear"})


class LocalSolveTest(unittest.TestCase):
    def test_a_percent_activation_budget_is_solved_as_a_share_of_the_plain_peak(self):
        with tempfile.TemporaryDirectory() as tmp:
            local = cli.Local(db=os.path.join(tmp, "edgecost.db"), progress=False)
            request = {"model": "linear", "device": "a72", "costSource": "poet-flops", "runtimeBudgetMultiple": 2,
                       "timeLimitS": 5}
            half = local.solve(dict(request, activationBudgetPercent=50))
            plain = local.solve(dict(request, activationBudgetBytes=str(1 << 40), strategy="checkpoint-all"))
            self.assertEqual(half["request"]["activationBudgetPercent"], 50)
            self.assertEqual(int(half["request"]["activationBudgetBytes"]), int(plain["peakRamBytes"]) // 2)
            self.assertLessEqual(int(half["peakRamBytes"]), int(half["request"]["activationBudgetBytes"]))


if __name__ == "__main__":
    unittest.main()
