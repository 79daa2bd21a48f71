import math
import unittest

import support  # noqa: F401  (import path)
import stats


class MedianTest(unittest.TestCase):
    def test_odd_and_even(self):
        self.assertEqual(stats.median([3, 1, 2]), 2)
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)
        self.assertEqual(stats.median([7]), 7)

    def test_empty(self):
        self.assertIsNone(stats.median([]))


class SpreadTest(unittest.TestCase):
    def test_cv_is_sample_stdev_over_mean(self):
        xs = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]  # mean 5, sample variance 32/7
        self.assertAlmostEqual(stats.cv(xs), math.sqrt(32 / 7) / 5)

    def test_cv_of_constant_is_zero(self):
        self.assertEqual(stats.cv([3.0, 3.0, 3.0]), 0.0)

    def test_cv_needs_two_values(self):
        self.assertIsNone(stats.cv([1.0]))
        self.assertIsNone(stats.stdev([]))


class RatioTest(unittest.TestCase):
    def test_ratio(self):
        self.assertEqual(stats.ratio(3.0, 2.0), 1.5)

    def test_missing_or_zero_baseline(self):
        self.assertIsNone(stats.ratio(None, 2.0))
        self.assertIsNone(stats.ratio(1.0, None))
        self.assertIsNone(stats.ratio(1.0, 0))


class GeomeanTest(unittest.TestCase):
    def test_geomean(self):
        self.assertAlmostEqual(stats.geomean([2.0, 8.0]), 4.0)
        self.assertAlmostEqual(stats.geomean([0.5, 2.0]), 1.0)

    def test_none_left_out(self):
        self.assertAlmostEqual(stats.geomean([None, 4.0, None, 1.0]), 2.0)
        self.assertIsNone(stats.geomean([None]))

    def test_non_positive_rejected(self):
        with self.assertRaises(ValueError):
            stats.geomean([1.0, 0.0])


if __name__ == "__main__":
    unittest.main()
