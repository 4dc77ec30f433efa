"""Does AOTInductor's loader crash in this image without the package? One case per process.

    python3 scripts/aoti_load_probe.py plain|stock|pkg

plain: ``x.sin() + 1``; stock: a 2x nearest upsample without the package; pkg: the same with it.
Exports, compiles with ``aoti_compile_and_package``, loads with ``aoti_load_package`` and checks
the result against eager (docs/runs/tests-h200-2026-11-21.md: all three crash in the H200
image's loader).
"""
import os, sys, tempfile, torch
import torch.nn.functional as F
case = sys.argv[1]
if case == "pkg":
    sys.path.insert(0, os.getcwd()); import decomps
class M(torch.nn.Module):
    def forward(self, x):
        return x.sin() + 1 if case == "plain" else F.interpolate(x, scale_factor=2.0)
x = torch.randn(2, 3, 5, 6)
ep = torch.export.export(M(), (x,))
p = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(tempfile.mkdtemp(), "m.pt2"))
print(case, "compiled", flush=True)
c = torch._inductor.aoti_load_package(p)
print(case, "loaded", torch.equal(c(x), M()(x)), flush=True)
