"""Every torch.distributed operation on the "meshtrain" backend against gloo.

Run under torchrun (tests/torch/CMakeLists.txt: 2, 3 and 4 ranks). The
default group is meshtrain's; a gloo group over the same ranks gets the same
inputs, and every result must equal gloo's and a reference each rank computes
itself. Inputs are small integers, so sums and products are exact in every
dtype and "equal" means bit for bit.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import meshtrain.torch  # noqa: F401  registers the backend

REDUCING = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64]
MOVING = REDUCING + [torch.uint8, torch.int8, torch.bool]
failures = []


def ints(rank, n, dtype, seed=0, low=-3, high=4):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    t = torch.randint(low, high, (n,), generator=g)
    if dtype == torch.bool:
        return t > 0
    if dtype == torch.uint8:
        return (t + 3).to(dtype)
    return t.to(dtype)


def expect(name, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{name}: got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}"
                        f" ({got.dtype} {tuple(got.shape)} vs {want.dtype} {tuple(want.shape)})")


def both(name, fn, gloo, reference=None):
    """fn(group) -> tensor or list of tensors; runs on meshtrain, then gloo."""
    ours = fn(None)
    theirs = fn(gloo) if gloo is not None else None
    ours = ours if isinstance(ours, (list, tuple)) else [ours]
    if theirs is not None:
        theirs = theirs if isinstance(theirs, (list, tuple)) else [theirs]
        for i, (a, b) in enumerate(zip(ours, theirs)):
            expect(f"{name}[{i}] vs gloo", a, b)
    if reference is not None:
        ref = reference if isinstance(reference, (list, tuple)) else [reference]
        for i, (a, b) in enumerate(zip(ours, ref)):
            expect(f"{name}[{i}] vs reference", a, b)


def main():
    dist.init_process_group("meshtrain", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "meshtrain", dist.get_backend()
    gloo = dist.new_group(backend="gloo")
    n = 1000 + 7  # not a multiple of any world size

    def all_inputs(n, dtype, seed=0):
        return [ints(r, n, dtype, seed) for r in range(world)]

    # allreduce: every op and reducing dtype; AVG (gloo has none) vs reference.
    ops = {dist.ReduceOp.SUM: lambda xs: sum(xs[1:], xs[0]),
           dist.ReduceOp.MIN: lambda xs: torch.stack(xs).min(0).values,
           dist.ReduceOp.MAX: lambda xs: torch.stack(xs).max(0).values,
           dist.ReduceOp.PRODUCT: lambda xs: torch.stack(xs).prod(0).to(xs[0].dtype)}
    for dtype in REDUCING:
        for op, fold in ops.items():
            low, high = (-1, 3) if op == dist.ReduceOp.PRODUCT else (-3, 4)
            xs = [ints(r, n, dtype, 1, low, high) for r in range(world)]

            def run(group, op=op, xs=xs):
                t = xs[rank].clone()
                dist.all_reduce(t, op=op, group=group)
                return t
            both(f"all_reduce {op} {dtype}", run, gloo, fold(xs))
    for dtype in (torch.float32, torch.float64, torch.int64):
        xs = [ints(r, n, dtype, 2) * world for r in range(world)]  # the average is exact
        t = xs[rank].clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        want = sum(xs[1:], xs[0]) // world if not dtype.is_floating_point else sum(xs[1:], xs[0]) / world
        expect(f"all_reduce AVG {dtype}", t, want.to(dtype))

    # A large float allreduce (several MiB: the progress engine's path) within rounding of gloo's.
    big = torch.randn(3 * 1024 * 1024 + 5, generator=torch.Generator().manual_seed(rank))
    a, b = big.clone(), big.clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=gloo)
    # Sums of 2-4 standard normals added in each library's own order: they
    # differ by a few float32 ulp (~1e-7 relative) when the orders differ; the
    # bound leaves room for that ordering, not for a missing or doubled term.
    if not torch.allclose(a, b, rtol=1e-5, atol=1e-5):
        failures.append(f"large all_reduce differs from gloo by {(a - b).abs().max().item()}")

    # Non-contiguous tensors are reduced in a contiguous copy written back to
    # the view: only the view's elements change. (gloo reduces the whole span
    # of storage under a strided view, elements between them included, so it
    # is not the reference here; docs/TORCH.md.)
    for dtype in (torch.float32, torch.int32):
        base = [ints(r, 2 * n, dtype, 3) for r in range(world)]

        def strided(group, base=base):
            t = base[rank].clone()
            view = t[::2]
            dist.all_reduce(view, group=group)
            return t
        want = base[rank].clone()
        want[::2] = sum((b[::2] for b in base[1:]), base[0][::2])
        both(f"all_reduce strided {dtype}", strided, None, want)

    # allreduce_coalesced (flattened into one reduction).
    def coalesced(group):
        ts = [ints(rank, k, torch.float32, 4 + k) for k in (3, 100, 17)]
        dist.all_reduce_coalesced(ts, group=group)
        return ts
    both("all_reduce_coalesced", coalesced, gloo)

    # broadcast from every root, every dtype (moved as bytes).
    for root in range(world):
        for dtype in MOVING:
            def run(group, root=root, dtype=dtype):
                t = ints(rank, n, dtype, 5)
                dist.broadcast(t, src=root, group=group)
                return t
            both(f"broadcast root {root} {dtype}", run, gloo, ints(root, n, dtype, 5))

    # reduce to every root: the root's result; the others keep their input.
    for root in range(world):
        xs = all_inputs(n, torch.float32, 6)

        def run(group, root=root, xs=xs):
            t = xs[rank].clone()
            dist.reduce(t, dst=root, group=group)
            return t
        want = sum(xs[1:], xs[0]) if rank == root else xs[rank]
        both(f"reduce root {root}", run, None, want)

    # all_gather (list) and all_gather_into_tensor.
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        xs = all_inputs(n, dtype, 7)

        def gather_list(group, xs=xs, dtype=dtype):
            out = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(out, xs[rank], group=group)
            return out
        both(f"all_gather {dtype}", gather_list, gloo, xs)

        def gather_tensor(group, xs=xs, dtype=dtype):
            out = torch.empty(world * n, dtype=dtype)
            dist.all_gather_into_tensor(out, xs[rank], group=group)
            return out
        both(f"all_gather_into_tensor {dtype}", gather_tensor, gloo, torch.cat(xs))

    # reduce_scatter (list) and reduce_scatter_tensor.
    for dtype in (torch.float32, torch.float64, torch.int32):
        parts = [[ints(r, n, dtype, 8 + p) for p in range(world)] for r in range(world)]
        want = sum((parts[r][rank] for r in range(1, world)), parts[0][rank])

        def rs_list(group, parts=parts, dtype=dtype):
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, [p.clone() for p in parts[rank]], group=group)
            return out
        both(f"reduce_scatter {dtype}", rs_list, None, want)

        def rs_tensor(group, parts=parts, dtype=dtype):
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(out, torch.cat(parts[rank]), group=group)
            return out
        both(f"reduce_scatter_tensor {dtype}", rs_tensor, None, want)

    # all_to_all_single: equal blocks, and unequal splits.
    rows = 5
    x = torch.arange(world * rows * 3, dtype=torch.float32).reshape(world * rows, 3) + 1000 * rank

    def a2a_equal(group):
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out
    both("all_to_all_single equal", a2a_equal, gloo)
    in_splits = [(rank + p) % 3 + 1 for p in range(world)]       # rank sends this many rows to p
    out_splits = [(p + rank) % 3 + 1 for p in range(world)]      # and gets p's rows for it
    y = torch.arange(sum(in_splits) * 2, dtype=torch.int64).reshape(-1, 2) + 100 * rank

    def a2a_split(group):
        out = torch.empty(sum(out_splits), 2, dtype=torch.int64)
        dist.all_to_all_single(out, y, out_splits, in_splits, group=group)
        return out
    both("all_to_all_single splits", a2a_split, gloo)

    def a2a_list(group):
        ins = [torch.full((p + rank + 1,), float(10 * rank + p)) for p in range(world)]
        outs = [torch.empty(rank + p + 1) for p in range(world)]
        dist.all_to_all(outs, ins, group=group)
        return outs
    both("all_to_all list", a2a_list, None,
         [torch.full((rank + p + 1,), float(10 * p + rank)) for p in range(world)])

    # gather and scatter to/from every root.
    for root in range(world):
        xs = all_inputs(n, torch.float32, 9)

        def gather(group, root=root, xs=xs):
            out = [torch.empty(n) for _ in range(world)] if rank == root else None
            dist.gather(xs[rank], out, dst=root, group=group)
            return out if rank == root else [xs[rank]]
        both(f"gather root {root}", gather, gloo, xs if rank == root else [xs[rank]])

        def scatter(group, root=root, xs=xs):
            out = torch.empty(n)
            dist.scatter(out, xs if rank == root else None, src=root, group=group)
            return out
        both(f"scatter root {root}", scatter, gloo, xs[rank])

    # send/recv around the ring, in both orders of issue.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(n, dtype=torch.float64)
    reqs = [dist.isend(ints(rank, n, torch.float64, 10), nxt), dist.irecv(got, prv)]
    for r in reqs:
        r.wait()
    expect("isend/irecv ring", got, ints(prv, n, torch.float64, 10))
    ops = [dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, ints(rank, n, torch.float64, 11), nxt)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    expect("batch_isend_irecv ring", got, ints(prv, n, torch.float64, 11))

    # Asynchronous work: futures complete without wait(), then() chains run.
    t = ints(rank, 4 * 1024 * 1024, torch.float32, 12)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    doubled = fut.wait()
    if not work.is_completed() or work.exception() is not None:
        failures.append("async all_reduce: work not completed after its future")
    expect("async future then()", doubled, 2 * sum(ints(r, 4 * 1024 * 1024, torch.float32, 12) for r in range(world)))

    dist.barrier()

    # Sub-groups: new_group over the first two ranks (and the others, when 3+).
    first = dist.new_group([0, 1], backend="meshtrain")
    if rank < 2:
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t, group=first)
        expect("new_group [0, 1]", t, torch.full((5,), 3.0))
    if world >= 3:
        rest = dist.new_group(list(range(1, world)))
        if rank >= 1:
            t = torch.full((3,), float(rank))
            dist.all_reduce(t, group=rest)
            expect("new_group [1..]", t, torch.full((3,), float(sum(range(1, world)))))
    if world == 4:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.full((4,), float(rank))
        dist.all_reduce(t, group=mesh.get_group("tp"))
        pair = [rank - rank % 2, rank - rank % 2 + 1]
        expect("device mesh tp group", t, torch.full((4,), float(sum(pair))))

    # Refusals with a clear message.
    for what, call in [("bitwise", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)),
                       ("bool sum", lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)))]:
        try:
            call()
            failures.append(f"{what}: no error")
        except Exception as e:  # noqa: BLE001
            if "meshtrain backend" not in str(e):
                failures.append(f"{what}: unclear error {e}")
    dist.barrier()

    status = 0
    if failures:
        status = 1
        for f in failures:
            print(f"rank {rank}: FAIL {f}", file=sys.stderr)
    else:
        print(f"rank {rank} of {world}: every operation equals gloo's and the reference")
    dist.destroy_process_group()
    sys.exit(status)


if __name__ == "__main__":
    main()
