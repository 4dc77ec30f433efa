"""The harness's CPU FPN neck training step against the same step without upsampling
(docs/findings.md, finding 3, "the FPN neck's float32 steps").

Usage: ``python -m perf.probes.cpu_neck_probe OUT_DIR [--stock] [--threads 1 2] [--rounds R]
[--steps S] [--dtypes float32 bfloat16]``

For each thread count and dtype, in one process, interleaved rounds of ``S`` steps per column, us
per step (best and median round) and minor page faults per step:

* ``neck, MODE, compiled`` and ``neck, MODE, eager``: the harness's step (``perf.bench``'s
  ``fpn_neck`` workload at its CPU levels, ``dynamic=True``), for both modes;
* ``lateral only, compiled`` and ``lateral only, eager``: the same step of
  ``perf.bench.LateralOnlyNeck`` with the neck's weights, every convolution of the neck and none
  of its upsampling or adds. Its compiled step bounds from below the compiled step of any
  formulation of the upsampling: where it is no faster than the neck's eager step, no kernel of the
  package puts the neck ahead of eager.

``--stock`` measures stock Inductor (``decomps.uninstall()`` first, installed again at the end).
Each compiled gradient is checked against eager's with the harness's check. Writes
``OUT_DIR/cpu_neck_probe[-stock].json`` and prints one line per thread count and dtype.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch

import decomps
from perf.bench import LateralOnlyNeck, Workload, build_workload, compare_results
from perf.cases import MODES, NECK_OUT_CHANNELS, NECK_SHAPE, Case
from perf.probes import cpu_rows, interleaved_rounds


def lateral_only(work: Workload) -> Workload:
    """The neck workload ``work`` with its model's weights in a ``LateralOnlyNeck``: the same
    inputs, outputs of the same shapes, the same gradients of them."""
    neck = work.forward
    model = LateralOnlyNeck(tuple(x.shape[1] for x in work.args), NECK_OUT_CHANNELS, neck.mode)
    model.load_state_dict(neck.state_dict())
    model.to(work.args[0].dtype)
    return replace(work, forward=model, wrt=(*model.parameters(), *work.args))


def _steps(work: Workload, dtype: str):
    """``(compiled step, eager step)`` of ``work``, the compiled one checked against eager's."""
    compiled = work.runner(torch.compile(work.forward, dynamic=True))
    eager = work.runner(work.forward)
    problem = compare_results(compiled(*work.args), eager(*work.args), work.check, dtype)
    assert problem is None, problem
    return (lambda: compiled(*work.args)), (lambda: eager(*work.args))


def measure(threads: int, dtype: str, shape, rounds: int, steps: int) -> dict:
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    columns = {}
    for mode in MODES:
        work = build_workload(Case("fpn_neck", "cpu", shape, dtype, mode=mode))
        columns[f"neck, {mode}, compiled"], columns[f"neck, {mode}, eager"] = _steps(work, dtype)
    work = lateral_only(build_workload(Case("fpn_neck", "cpu", shape, dtype, mode=MODES[0])))
    columns["lateral only, compiled"], columns["lateral only, eager"] = _steps(work, dtype)
    for fn in columns.values():
        fn()
    return {
        "tag": "package" if decomps.is_installed() else "stock",
        "threads": threads,
        "dtype": dtype,
        "shape": list(shape),
        **interleaved_rounds(columns, rounds, steps),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.probes.cpu_neck_probe")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--stock", action="store_true", help="stock Inductor: uninstall the package first")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), default=["float32"])
    args = parser.parse_args(argv)
    if args.stock:
        decomps.uninstall()
    try:
        return cpu_rows("cpu_neck_probe-stock" if args.stock else "cpu_neck_probe", args.out_dir, args.threads,
                        [(dtype, NECK_SHAPE["cpu"]) for dtype in args.dtypes],
                        lambda n, dtype, shape: measure(n, dtype, shape, args.rounds, args.steps))
    finally:
        if args.stock:
            decomps.install()


if __name__ == "__main__":
    raise SystemExit(main())
