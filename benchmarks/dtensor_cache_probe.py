"""Does DTensor's sharding cache tell apart two calls of a pingpong op that differ only in a
non-tensor argument (activation by keyword, out_dtype)? register_sharding's schema info names
only int arguments as part of the key; "broken" forces that schema info (static_argnum=100), in
case pingpong's registration ever sets another. CPU, torch's fake process group (RESULTS.md run 160).

    PYTHONPATH=src python benchmarks/dtensor_cache_probe.py [broken]

Expected: Partial(sum) then Shard(dim=0) (relu needs the complete sum), and an fp32 output.
"""
import os, sys, torch, torch.distributed as dist
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from conftest import interpret_plans
from torch.testing._internal.distributed.fake_pg import FakeStore
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
from torch.distributed.tensor import DTensor, Replicate, Partial, init_device_mesh
import pingpong.distributed as d
if "broken" in sys.argv:
    from torch.distributed.tensor._op_schema import RuntimeSchemaInfo
    for op in d.LAYOUTS:
        DTensor._op_dispatcher.sharding_propagator.op_to_schema_info[op] = RuntimeSchemaInfo(100, None, needs_pytree=True)
interpret_plans(setattr)
mesh = init_device_mesh("cpu", (2,))
a = DTensor.from_local(torch.randn(8, 6).half(), mesh, [Partial()]); b = DTensor.from_local(torch.randn(6, 4).half(), mesh, [Replicate()])
g = torch.ops.pingpong.gemm.default
from pingpong import ops
print(torch.__version__, sys.argv[1:], "op kw:", g(a, b).placements, g(a, b, activation="relu").placements,
      "customop kw:", ops.gemm(a, b, alpha=2.0).placements, ops.gemm(a, b, alpha=2.0, activation="relu").placements)
m = torch.ops.pingpong.mm.default
print("mm out_dtype:", m(a, b).dtype, m(a, b, out_dtype=torch.float32).dtype, m(a, b, out_dtype=torch.float32).to_local().dtype)
dist.destroy_process_group()
