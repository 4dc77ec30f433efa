"""index_patterns: a pattern, static or symbolic, is taken only where it is eager's whole map."""

from __future__ import annotations

import itertools

from torch.testing._internal.common_utils import TestCase, run_tests

from decomps import backward_windows, eager_rules, index_patterns
from decomps.eager_rules import Rule
from decomps.index_patterns import Pattern
from decomps.size_conditions import host_tensors

SIZES = range(1, 33)
SCALES = (None, 0.5, 2.0, 1.7, 1 / 3)
# Forward rules of eager's kernels (docs/semantics.md): CUDA 1d / 2d, CPU generic in float32 and
# float64 (nearest-exact with and without FMA), CPU channels-last (the header helpers).
FORWARD_RULES = (
    Rule(exact=False), Rule(exact=True), Rule(exact=False, identity_if_equal=True),
    Rule(exact=True, identity_if_equal=True), Rule(exact=False, double=True),
    Rule(exact=True, centre_shift=True, fma=True), Rule(exact=True, centre_shift=True),
    Rule(exact=True, double=True, centre_shift=True), Rule(exact=False, header_special=True),
)
WINDOW_RULES = (eager_rules.cpu_backward_rule(False), eager_rules.cpu_backward_rule(True),
                "cuda", "cuda-exact")


def _forward_map(pattern: Pattern, osize: int) -> list[int]:
    if pattern.kind == "identity":
        return list(range(osize))
    if pattern.kind == "repeat":
        return [o // pattern.factor for o in range(osize)]
    return [o * pattern.factor + pattern.offset for o in range(osize)]


def _window_starts(pattern: Pattern, isize: int) -> list[int]:
    if pattern.kind == "identity":
        return list(range(isize + 1))
    if pattern.kind == "repeat":
        return [pattern.factor * i for i in range(isize + 1)]
    # one output per period of the input, at the offset
    return list(itertools.accumulate([0] + [int(i % pattern.factor == pattern.offset) for i in range(isize)]))


class TestIndexPatterns(TestCase):
    def _check(self, rules, evaluate, expand, static_pattern, symbolic_pattern, least_symbolic):
        """Every pattern found (static, or by the symbolic rule on the same sizes) reproduces the
        map ``evaluate`` gives; the symbolic rule finds nothing the static proof does not;
        power-of-two upsampling without a scale always has one."""
        found = {"static": 0, "symbolic": 0}
        for rule, scale, isize, osize in itertools.product(rules, SCALES, SIZES, SIZES):
            where = (rule, scale, isize, osize)
            static = static_pattern(isize, osize, scale, rule)
            symbolic = symbolic_pattern(isize, osize, scale, rule)
            if static is not None:
                found["static"] += 1
                self.assertEqual(expand(static, isize, osize), evaluate(isize, osize, scale, rule), msg=where)
            if symbolic is not None:
                found["symbolic"] += 1
                self.assertEqual(symbolic, static, msg=where)
            if scale is None and osize in (isize, 2 * isize, 4 * isize):
                self.assertIsNotNone(symbolic, msg=where)
        self.assertGreater(found["symbolic"], least_symbolic)
        self.assertGreater(found["static"], found["symbolic"])  # strides, x3: static sizes only

    def test_forward_patterns_are_eager_maps(self):
        self._check(FORWARD_RULES, eager_rules.static_source_indices, lambda p, i, o: _forward_map(p, o),
                    index_patterns.static_pattern, index_patterns.symbolic_pattern, 1000)

    def test_window_patterns_are_eager_windows(self):
        def window_starts(isize, osize, scale, rule):
            with host_tensors():
                return backward_windows.window_starts(isize, osize, scale, rule, "cpu").tolist()

        self._check(WINDOW_RULES, window_starts, lambda p, i, o: _window_starts(p, i),
                    index_patterns.static_window_pattern, index_patterns.symbolic_window_pattern, 100)


def test_repeat_factors():
    Pattern = index_patterns.Pattern
    patterns = [Pattern("repeat", 3), Pattern("identity"), Pattern("stride", 2, 1), Pattern("repeat", 2)]
    assert index_patterns.repeat_factors(patterns) == [3, 1, 1, 2]


if __name__ == "__main__":
    run_tests()
