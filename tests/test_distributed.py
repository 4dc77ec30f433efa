"""DDP with the decompositions (issue 6, item 7).

Two CPU processes (gloo, 127.0.0.1, a free port) run one training step of
conv -> F.interpolate(scale_factor=2, mode="nearest") -> conv under DDP, compiled with the
package installed (Dynamo's DDPOptimizer on, its default), and the same step under
eager DDP; gradients, the loss and the updated parameters must agree. The test launches this
file twice as a script (``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT``, as
torchrun would).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest

WORLD_SIZE = 2
TIMEOUT_S = 600  # the whole step, both ranks, cold compile (about 20 s on a 2-core machine)
COLLECTIVE_TIMEOUT_S = 120  # a rank whose peer died fails instead of waiting 30 minutes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_training_step_matches_eager_ddp(tmp_path):
    port = _free_port()
    procs = []
    for rank in range(WORLD_SIZE):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(WORLD_SIZE),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            # loopback only (gloo otherwise binds the address the host name resolves to), and
            # Inductor compiles in-process (no compile-worker pool per rank on a 2-core runner)
            GLOO_SOCKET_IFNAME="lo",
            TORCHINDUCTOR_COMPILE_THREADS="1",
            # a cache hit would skip the decompositions this test checks were used; a cache
            # folder per rank shares no lock files with the other rank or the test process
            TORCHINDUCTOR_FORCE_DISABLE_CACHES="1",
            TORCHINDUCTOR_CACHE_DIR=os.fspath(tmp_path / f"inductor-rank{rank}"),
            DECOMPS_DDP_OUT=os.fspath(tmp_path / f"rank{rank}.json"),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__)],
                env=env,
                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            tails = [f"rank {r}:\n{q.communicate()[0][-3000:]}" for r, q in enumerate(procs)]
            pytest.fail(f"DDP step did not finish in {TIMEOUT_S} s\n" + "\n".join(tails))
        outputs.append(out)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{out[-5000:]}"
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(WORLD_SIZE)]
    for rank, r in enumerate(results):
        assert r["installed"], rank
        assert r["frames"] >= 1, "nothing was compiled"
        assert r["forward_decomposed"] and r["backward_decomposed"], r
        assert r["mismatches"] == [], r["mismatches"]
    # DDP averaged the gradients: both ranks hold the same ones (and so the same parameters)
    assert results[0]["grad_checksum"] == results[1]["grad_checksum"]
    assert results[0]["loss"] != results[1]["loss"], "ranks should see different data"


# ---------------------------------------------------------------------------------------------
# the worker (run as a script)


def _worker() -> None:
    import copy
    import faulthandler

    # A rank that hangs prints where, in the output the test reports, before the test gives up.
    faulthandler.dump_traceback_later(TIMEOUT_S - 60, exit=True)

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    import decomps
    from decomps import backward as bwd_module
    from decomps import forward as fwd_module

    calls = {"forward": 0, "backward": 0}
    fwd_orig, bwd_orig = fwd_module.upsample_nearest, bwd_module.upsample_nearest_backward

    def fwd_spy(*args, **kwargs):
        calls["forward"] += 1
        return fwd_orig(*args, **kwargs)

    def bwd_spy(*args, **kwargs):
        calls["backward"] += 1
        return bwd_orig(*args, **kwargs)

    fwd_module.upsample_nearest = fwd_spy
    bwd_module.upsample_nearest_backward = bwd_spy

    rank = int(os.environ["RANK"])
    dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S),
    )
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(8, 4, 3, padding=1)

        def forward(self, x):
            x = torch.relu(self.conv1(x))
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            return self.conv2(x)

    model = Net()
    eager_model = copy.deepcopy(model)
    ddp = DDP(model)
    ddp_eager = DDP(eager_model)
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(ddp, backend=counter)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    opt_eager = torch.optim.SGD(ddp_eager.parameters(), lr=0.1)

    gen = torch.Generator().manual_seed(100 + rank)  # each rank its own batch
    x = torch.randn(4, 3, 9, 11, generator=gen)
    target = torch.randn(4, 4, 18, 22, generator=gen)

    loss = F.mse_loss(compiled(x), target)
    loss.backward()
    loss_eager = F.mse_loss(ddp_eager(x), target)
    loss_eager.backward()

    mismatches = []
    if not torch.allclose(loss, loss_eager, rtol=1e-5, atol=1e-7):
        mismatches.append(f"loss {loss.item()} vs {loss_eager.item()}")
    named = dict(eager_model.named_parameters())
    for name, p in model.named_parameters():
        try:
            torch.testing.assert_close(p.grad, named[name].grad, rtol=1e-5, atol=1e-7)
        except AssertionError as e:
            mismatches.append(f"grad {name}: {e}")
    opt.step()
    opt_eager.step()
    for name, p in model.named_parameters():
        try:
            torch.testing.assert_close(p, named[name], rtol=1e-5, atol=1e-7)
        except AssertionError as e:
            mismatches.append(f"param {name}: {e}")

    checksum = float(sum(p.grad.double().sum() for p in model.parameters()))
    with open(os.environ["DECOMPS_DDP_OUT"], "w") as f:
        json.dump(
            {
                "installed": decomps.is_installed(),
                "frames": counter.frame_count,
                "forward_decomposed": calls["forward"] > 0,
                "backward_decomposed": calls["backward"] > 0,
                "mismatches": mismatches,
                "grad_checksum": checksum,
                "loss": loss.item(),
            },
            f,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _worker()
