"""size_conditions: which size conditions install guards, which are proofs, which run in the graph."""

from __future__ import annotations

import operator
import warnings

import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.utils._sympy.functions import FloorDiv

from decomps import size_conditions
from tests.common import exporting, symbolic_sizes


class TestSizeConditions(TestCase):
    def test_python_bools_pass_through(self):
        for condition in (True, False):
            self.assertIs(size_conditions.holds(condition), condition)
            self.assertIs(size_conditions.holds_where_taken(condition), condition)
        self.assertIs(size_conditions.size_test(operator.eq, 4, 4), True)

    def test_holds_guards_under_compile(self):
        """Under torch.compile a condition is a guard on the example sizes, true or false."""
        env, (i, o) = symbolic_sizes(5, 10)
        self.assertTrue(size_conditions.holds(o >= 2 * i))
        self.assertFalse(size_conditions.holds(o > 3 * i))
        self.assertEqual(len(env.guards), 2)

    def test_holds_proves_while_exporting(self):
        """While exporting only what the shape env proves holds, and nothing is guarded: true
        at the example sizes is not enough."""
        env, (i, o) = symbolic_sizes(5, 10)
        with exporting():
            self.assertFalse(size_conditions.holds(o == 2 * i))
            self.assertTrue(size_conditions.holds(2 * i > i))
            self.assertFalse(size_conditions.holds_where_taken(o == 2 * i))
        self.assertEqual(env.guards, [])

    def test_holds_where_taken_guards_only_where_the_example_takes_it(self):
        env, (i, o) = symbolic_sizes(4, 7)
        self.assertFalse(size_conditions.holds_where_taken(o * 2 == i * 3))
        self.assertEqual(env.guards, [])  # later sizes with the ratio reuse this graph
        self.assertTrue(size_conditions.holds_where_taken(o * 4 == i * 7))
        self.assertEqual(len(env.guards), 1)

    def test_int32_where_every_bound_holds(self):
        self.assertEqual(size_conditions.int32_where(True, True), torch.int32)
        self.assertEqual(size_conditions.int32_where(True, False), torch.int64)
        env, (i, o) = symbolic_sizes(200, 300)
        self.assertEqual(size_conditions.int32_where(i <= 2**30, o <= 2**30), torch.int32)
        self.assertEqual(len(env.guards), 2)
        env, (i, o) = symbolic_sizes(200, 2**31)
        self.assertEqual(size_conditions.int32_where(i <= 2**30, o <= 2**30), torch.int64)
        self.assertEqual(len(env.guards), 1)  # the example fails the second: no guard on it

    def test_hints_read_example_values_without_guards(self):
        """Example values of sizes and of expressions over them, with no guard and no warning
        (torch 2.11's ``hint_int`` warns that it is deprecated)."""
        env, (i, o) = symbolic_sizes(4, 7)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.assertEqual(size_conditions.size_hint(i), 4)
            self.assertEqual(size_conditions.size_hint(3 * i + o), 19)
            self.assertEqual(size_conditions.ratio_hint(o, i), 1)
            self.assertEqual(size_conditions.ratio_hint(o, i, ceil=True), 2)
        self.assertEqual(env.guards, [])

    def test_size_tests_run_in_the_graph(self):
        """``size_test`` and ``sizes_equal`` on symbolic sizes are computed by the graph at run
        time: one traced graph answers for sizes on both sides of the condition."""

        def f(x):
            h, w = x.shape
            same = size_conditions.sizes_equal([h], [w])
            wide = size_conditions.size_test(operator.gt, w, 3)
            return torch.where(same, 1, 0) + torch.where(wide, 2, 0)

        graph = make_fx(f, tracing_mode="symbolic")(torch.ones(3, 4))  # 3, 4: distinct symbols
        for (h, w), expected in (((3, 3), 0 + 1), ((3, 5), 2), ((6, 6), 3), ((2, 1), 0)):
            self.assertEqual(int(graph(torch.ones(h, w))), expected, msg=(h, w))

    def test_scaled_sizes_differ_from_multiples_by_proof(self):
        """An output size computed from a scale factor (``.vec``) provably differs from ``k`` times
        the input size over the input's range (from 2), with no guard; other sizes prove nothing."""
        env, (i, other) = symbolic_sizes(5, 7)
        differs = size_conditions.scaled_size_differs
        cases = [
            (1.5, 1, True),    # trunc(1.5 I) >= I + 1 from I = 2
            (1.5, 2, True),    # below 2: never 2 I
            (1.2, 1, False),   # trunc(1.2 I) == I for I <= 4
            (1.2, 2, True),
            (2.5, 2, True),    # 2 I + 1 from I = 2
            (2.2, 2, False),   # trunc(2.2 I) == 2 I for I <= 4
            (0.7, 1, True),
        ]
        scaled = {scale: size_conditions.scaled_size(i, scale) for scale, _, _ in cases}
        guards = list(env.guards)  # the integer form's bound (test_scaled_size_matches_eager)
        for scale, k, expected in cases:
            self.assertIs(differs(i, scaled[scale], scale, k), expected, msg=(scale, k))
            # sound over the range: no size from 2 on where the size equals k I
            if expected:
                self.assertTrue(all(int(n * scale) != k * n for n in range(2, 5000)), msg=(scale, k))
            else:
                self.assertTrue(any(int(n * scale) == k * n for n in range(2, 5000)), msg=(scale, k))
        self.assertFalse(differs(i, other, 1.5, 1))  # not computed from the scale
        self.assertFalse(differs(i, size_conditions.scaled_size(i, 1.5), None, 1))
        self.assertFalse(differs(i, 2 * i, 2.0, 1))  # integral factors: a polynomial, sympy decides
        self.assertFalse(differs(4, 6, 1.5, 1))  # static sizes: decided on the host
        self.assertEqual(env.guards, guards)

    def test_scaled_size_matches_eager(self):
        """``.vec``'s output size: eager's ``(int64_t)(double(I) * s)``. A symbolic size with a
        scale ``p / 2**k`` of small ``p`` is ``(p * I) // 2**k`` under the guard ``p * I < 2**53``
        (exact below it); other scales keep the float form, with no guard."""
        for scale, numerator in [(1.5, 3), (0.75, 3), (2.5, 5), (1.25, 5), (0.5, 1)]:
            env, (i,) = symbolic_sizes(7)
            o = size_conditions.scaled_size(i, scale)
            self.assertEqual(o.node.expr, FloorDiv(numerator * i.node.expr, round(numerator / scale)))
            self.assertEqual(len(env.guards), 1, msg=scale)
            for n in [2, 3, 7, 1000, 12345, 2**40 + 1, 2**53 // numerator - 1]:
                self.assertEqual(o.node.expr.subs(i.node.expr, n), int(n * scale), msg=(scale, n))
        for scale in (0.1, 1.3, 1 / 3):  # p near 2**53: the float form
            env, (i,) = symbolic_sizes(7)
            o = size_conditions.scaled_size(i, scale)
            self.assertIn("ToFloat", str(o.node.expr))
            self.assertEqual(env.guards, [])
            self.assertEqual(o.node.expr.subs(i.node.expr, 1000), int(1000 * scale))
        env, (i,) = symbolic_sizes(7)
        with exporting():  # no declared bound below 2**53: the float form, no guard
            self.assertIn("ToFloat", str(size_conditions.scaled_size(i, 1.5).node.expr))
        self.assertEqual(env.guards, [])
        self.assertEqual(size_conditions.scaled_size(7, 1.5), 10)
        self.assertEqual(size_conditions.scaled_size(7, 2.0), 14)

    def test_host_tensors_leave_fake_mode(self):
        """Inside a fake mode, ``host_tensors`` computes real values (the host proofs need them)."""
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        with FakeTensorMode():
            self.assertIsInstance(torch.arange(3), FakeTensor)
            with size_conditions.host_tensors():
                values = torch.arange(3) * 2
                self.assertNotIsInstance(values, FakeTensor)
                self.assertEqual(values.tolist(), [0, 2, 4])


if __name__ == "__main__":
    run_tests()
