"""Mutation pass over the CPU suite: apply one break at a time, run the tests meant to catch it,
expect them to fail, restore the file. The table in benchmarks/MUTATIONS.md is its output.

    PYTHONPATH=src python benchmarks/mutations.py            # every mutation
    PYTHONPATH=src python benchmarks/mutations.py NAME ...   # some of them

Each mutation is (name, file, the exact text to replace, its replacement, the test
selection). The text must occur in the file exactly once, so a refactor that moves it makes
this script fail loudly instead of testing nothing. Exit 1 if any mutation survives.
Run it on a clean tree: a file is restored after each run, but a killed script can leave one
mutated (`git checkout -- src` restores it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MUTATIONS = [
    # -- 64-bit indexing of the portable GEMM
    ("int64 switch forced off", "src/pingpong/portable/__init__.py",
     "INDEX_64=needs_int64(a, b, c, out)", "INDEX_64=False",
     "tests/test_reliability_indexing.py"),
    ("int64 threshold moved to 2**32", "src/pingpong/runtime/addressing.py",
     "span(t) > INT32_MAX for t in tensors", "span(t) > 2**32 for t in tensors",
     "tests/test_reliability_indexing.py"),
    ("int64 threshold off by one", "src/pingpong/runtime/addressing.py",
     "span(t) > INT32_MAX for t in tensors", "span(t) > INT32_MAX + 1 for t in tensors",
     "tests/test_reliability_indexing.py"),
    ("K-step advance in 32 bits", "src/pingpong/portable/__init__.py",
     "a_step = tl.cast(stride_ak, tl.int64) * BK", "a_step = stride_ak * BK",
     "tests/test_reliability_indexing.py"),
    # -- KernelConfig's shared-memory budget and bounds
    ("smem limit check loosened by 4 KB", "src/pingpong/hopper/config.py",
     "if total > SMEM_LIMIT:", "if total > SMEM_LIMIT + 4096:",
     "tests/test_reliability_config.py"),
    ("fixed-bytes term zeroed", "src/pingpong/hopper/config.py",
     "_epilogue(cfg, in_bytes, out_bytes)[2] + _FIXED_BYTES", "_epilogue(cfg, in_bytes, out_bytes)[2] + 0",
     "tests/test_reliability_config.py"),
    ("staging term zeroed", "src/pingpong/hopper/config.py",
     "_epilogue(cfg, in_bytes, out_bytes)[2] + _FIXED_BYTES", "_FIXED_BYTES",
     "tests/test_reliability_config.py"),
    ("SMEM_LIMIT raised to 228 KB", "src/pingpong/hopper/config.py",
     "SMEM_LIMIT = 227 * 1024", "SMEM_LIMIT = 228 * 1024",
     "tests/test_reliability_config.py tests/test_config.py"),
    ("stages upper bound dropped", "src/pingpong/hopper/config.py",
     "if self.stages > MAX_STAGES:", "if False:",
     "tests/test_reliability_config.py"),
    ("group_m upper bound dropped", "src/pingpong/hopper/config.py",
     "if self.group_m > MAX_GROUP_M:", "if False:",
     "tests/test_reliability_config.py"),
    ("derive cached by equality (untyped)", "src/pingpong/hopper/config.py",
     "@functools.lru_cache(maxsize=None, typed=True)", "@functools.lru_cache(maxsize=None)",
     "tests/test_reliability_config.py"),
    # -- the spill / local-memory detector
    ("CUDA spill bytes forced to 0", "src/pingpong/runtime/compile.py",
     'spill_bytes=field("STACK") + field("LOCAL")', "spill_bytes=0",
     "tests/test_reliability_detectors.py"),
    ("SASS LDL/STL regex never matches", "src/pingpong/runtime/compile.py",
     r'"LDL/STL": ("s", r"\b(LDL|STL)\b")', r'"LDL/STL": ("s", r"\bNEVER_MATCHES\b")',
     "tests/test_reliability_detectors.py"),
    ("AMD spill bytes forced to 0", "src/pingpong/runtime/compile.py",
     "spill_bytes=scratch + 4 * (vgpr_spills + sgpr_spills),", "spill_bytes=0,",
     "tests/test_reliability_detectors.py"),
    ("AMD scratch bytes not read", "src/pingpong/runtime/compile.py",
     'scratch = _amd_meta(text, "private_segment_fixed_size")', 'scratch = _amd_meta(text, "no_such_key")',
     "tests/test_reliability_detectors.py"),
    ("AMD scratch dropped from spill bytes", "src/pingpong/runtime/compile.py",
     "spill_bytes=scratch + 4 * (vgpr_spills + sgpr_spills),", "spill_bytes=4 * (vgpr_spills + sgpr_spills),",
     "tests/test_reliability_detectors.py"),
    ("AMD VGPR spill count not read", "src/pingpong/runtime/compile.py",
     '_amd_meta(text, "vgpr_spill_count")', '_amd_meta(text, "no_such_key")',
     "tests/test_reliability_detectors.py"),
    # -- TMA legality
    ("TMA base-alignment check removed", "src/pingpong/hopper/launch.py",
     "if not (t.aligned if type(t) is Operand else t.data_ptr() % 16 == 0):", "if False:",
     "tests/test_reliability_detectors.py"),
    # -- the schedule checker's truncated searches and its CLI
    ("truncated search not marked", "src/pingpong/schedule/checker.py",
     '            res.truncated = True\n            res.notes.append(f"stopped after {max_states} states',
     '            res.notes.append(f"stopped after {max_states} states',
     "tests/test_reliability_schedule_cli.py"),
    ("INCOMPLETE verdict printed as SAFE", "src/pingpong/schedule/checker.py",
     'return "INCOMPLETE" if self.truncated else "SAFE"', 'return "SAFE"',
     "tests/test_reliability_schedule_cli.py"),
    ("state bound off by one", "src/pingpong/schedule/checker.py",
     "if len(parent) > max_states:", "if len(parent) > max_states + 1:",
     "tests/test_reliability_schedule_cli.py"),
    ("CLI exit code 0 for INCOMPLETE", "src/pingpong/schedule/cli.py",
     "return EXIT_INCOMPLETE if incomplete else EXIT_SAFE", "return EXIT_SAFE",
     "tests/test_reliability_schedule_cli.py"),
    ("CLI accepts --k-iters 0", "src/pingpong/schedule/cli.py",
     "if args.k_iters is not None and args.k_iters < 1:", "if False:",
     "tests/test_reliability_schedule_cli.py"),
    ("CLI accepts negative --stop-after", "src/pingpong/schedule/cli.py",
     "if args.stop_after < 0:", "if False:",
     "tests/test_reliability_schedule_cli.py"),
    ("user file import errors uncaught", "src/pingpong/schedule/cli.py",
     "except (Exception, SystemExit) as e:  # the user's code", "except KeyboardInterrupt as e:  # the user's code",
     "tests/test_reliability_schedule_cli.py"),
    # -- the Hopper models follow the kernel
    ("cooperative model with empty count 1", "src/pingpong/schedule/schedules/hopper.py",
     'releasers = 1 if variant == "single_releaser" else 2', "releasers = 1",
     "tests/test_reliability_schedule_models.py"),
    ("epilogue model ignores stores_left_in_flight", "src/pingpong/schedule/schedules/hopper.py",
     'window = stores_left_in_flight(bufs) + (variant == "store_wait_late")', "window = 0",
     "tests/test_reliability_schedule_models.py"),
    ("epilogue model ignores c_parity", "src/pingpong/schedule/schedules/hopper.py",
     'parity = c_parity.fn(seq) ^ (variant == "c_parity_flipped")', "parity = seq & 1",
     "tests/test_reliability_schedule_models.py"),
    # -- streaming
    ("vector_add(None, b) unchecked", "src/pingpong/streaming/api.py",
     'if (t is not None or name != "out") and not isinstance(t, torch.Tensor):',
     "if t is not None and not isinstance(t, torch.Tensor):",
     "tests/test_reliability_streaming.py"),
    ("vector_add bench times a wrong size", "src/pingpong/streaming/bench.py",
     "        if not correct:\n            rows.append(dict(common", "        if False:\n            rows.append(dict(common",
     "tests/test_reliability_streaming.py"),
    ("stream sweep times a wrong row", "src/pingpong/streaming/bench.py",
     "                if not correct:\n                    r = dict(base", "                if False:\n                    r = dict(base",
     "tests/test_reliability_streaming.py"),
    # -- offline compilation and `pingpong isa`
    ("offline() stub shared by all threads", "src/pingpong/runtime/compile.py",
     "_THREAD = threading.local()", "_THREAD = type(\"Shared\", (), {})()",
     "tests/test_reliability_compile.py"),
    ("isa --dump path checked after compiling", "src/pingpong/tools/isa.py",
     "    if problem:  # found before compiling, not after", "    if False:",
     "tests/test_reliability_compile.py"),
    # -- addressability predicate
    ("buffer-op limit counted in elements, not bytes", "src/pingpong/runtime/addressing.py",
     "nbytes = (span(t) + 1) * t.element_size()", "nbytes = span(t) + 1",
     "tests/test_reliability_indexing.py"),
    ("TMA stride limit dropped", "src/pingpong/runtime/addressing.py",
     "if st * t.element_size() >= TMA_STRIDE_BYTES_LIMIT]", "if False]",
     "tests/test_reliability_indexing.py"),
    # -- the lead's checks (api.py, bench.py), listed in the same issue
    ("bench correctness tolerance loosened 10x", "src/pingpong/tools/bench.py",
     "return err <= TOLERANCE[dtype]", "return err <= 10 * TOLERANCE[dtype]",
     "tests/test_bench.py"),
    ("gemm_ overlap check against b dropped (per-call path)", "src/pingpong/runtime/spec.py",
     "if (c0 < a0 + ea and a0 < c1) or (c0 < b0 + eb and b0 < c1):", "if (c0 < a0 + ea and a0 < c1):",
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py"),
    ("gemm_ overlap check against b dropped (named check)", "src/pingpong/runtime/spec.py",
     '    for other, t in ((names.a, a), (names.b, b)):\n        if overlaps(c, t):',
     '    for other, t in ((names.a, a),):\n        if overlaps(c, t):',
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py"),
    ("overlap span one element short", "src/pingpong/runtime/spec.py",
     "return start, start + t.element_size() * (1 + span(t))", "return start, start + t.element_size() * span(t)",
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py tests/test_reliability_refusals.py"),
    ("span counts size for size - 1", "src/pingpong/runtime/spec.py",
     "return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))",
     "return sum(s * abs(st) for s, st in zip(t.shape, t.stride()))",
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py tests/test_reliability_refusals.py"),
    ("bias-in-c check dropped on a cached plan", "src/pingpong/direct.py",
     "        spec_mod.check_no_alias_fast(c, a, b, plan.extents)  # addresses change from call to call\n"
     "        spec_mod.check_bias_not_in(c, bias)",
     "        spec_mod.check_no_alias_fast(c, a, b, plan.extents)  # addresses change from call to call",
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py tests/test_reliability_refusals.py"),
    ("device check on c dropped", "src/pingpong/runtime/spec.py",
     "    if c.device != device:", "    if False:",
     "tests/test_api_validation.py tests/test_plan.py tests/test_reliability_plan.py"),
    # -- the fused epilogue and batched products
    ("activation dropped", "src/pingpong/portable/__init__.py",
     "    acc = activate(acc, ACTIVATION)\n    if HAS_C:", "    if HAS_C:",
     "tests/test_fused.py -k portable"),
    ("residual added before the activation", "src/pingpong/portable/__init__.py",
     "    acc = activate(acc, ACTIVATION)\n    if HAS_C:\n        c = tl.load(c_ptr + batch * stride_cb + rm[:, None] * stride_cm"
     " + rn[None, :] * stride_cn, mask=mask,\n                    other=0.0)\n        acc += beta * c.to(tl.float32)\n",
     "    if HAS_C:\n        c = tl.load(c_ptr + batch * stride_cb + rm[:, None] * stride_cm"
     " + rn[None, :] * stride_cn, mask=mask,\n                    other=0.0)\n        acc += beta * c.to(tl.float32)\n"
     "    acc = activate(acc, ACTIVATION)\n",
     "tests/test_fused.py -k portable"),
    ("row bias read per column", "src/pingpong/portable/__init__.py",
     "acc += tl.load(bias_ptr + rm, mask=mask_m, other=0.0).to(tl.float32)[:, None]",
     "acc += tl.load(bias_ptr + rn, mask=mask_n, other=0.0).to(tl.float32)[None, :]",
     "tests/test_fused.py -k portable"),
    ("C's batch stride ignored", "src/pingpong/portable/__init__.py",
     "c_ptr + batch * stride_cb", "c_ptr", "tests/test_fused.py -k batched"),
    ("gelu_tanh cubic coefficient", "src/pingpong/portable/__init__.py",
     "(z + 0.044715 * z * z * z)", "(z + 0.0447 * z * z * z)", "tests/test_fused.py -k grid"),
    ("(M, 1) bias taken per column", "src/pingpong/runtime/spec.py",
     'return "row" if len(shape) == 2', 'return "col" if len(shape) == 2', "tests/test_fused.py"),
    ("unknown activation accepted", "src/pingpong/runtime/spec.py",
     "if not isinstance(activation, str) or activation not in ACTIVATIONS:", "if not isinstance(activation, str):",
     "tests/test_fused.py tests/test_api_validation.py"),
    ("empty K ignores the bias", "src/pingpong/runtime/plan.py",
     "            y = torch_activation(self.activation)(y + bias.float())",
     "            y = torch_activation(self.activation)(y)", "tests/test_plan.py"),
    ("size-1 batch read with its stride", "src/pingpong/portable/__init__.py",
     "return (0 if t.shape[0] == 1 else t.stride(0), *t.stride()[1:])", "return tuple(t.stride())",
     "tests/test_fused.py -k batched"),
    ("split-K drops the bias", "src/pingpong/hopper/launch.py",
     "epi = EpilogueConstants(HAS_C=has_c, BIAS=kind,",
     'epi = EpilogueConstants(HAS_C=has_c, BIAS="none",', "tests/test_plan.py"),
    ("swap-AB keeps the caller's bias orientation", "src/pingpong/hopper/launch.py",
     'return {"col": "row", "row": "col"}.get(kind, kind) if swap else kind', "return kind", "tests/test_plan.py"),
    ("split strides passed in bytes/4 twice", "src/pingpong/hopper/launch.py",
     "splits, block // 4, ld // 4,", "splits, block // 16, ld // 16,", "tests/test_splitk.py"),
    ("counters for one consumer half only", "src/pingpong/hopper/launch.py",
     "* (d.block_m // d.consumer_m) *", "*", "tests/test_splitk.py"),
    ("batched call kept on split-K", "src/pingpong/hopper/backend.py",
     "        if _one_kernel(spec):\n            config = one_kernel_config(config)\n", "", "tests/test_plan.py"),
    ("batch stride legality unchecked", "src/pingpong/hopper/backend.py",
     "if len(shape) == 3 and not (shape[0] == 1 or st[0] == 0) and (st[0] * size) % 16:", "if False:",
     "tests/test_plan.py"),
    ("batch split off by one tile", "src/pingpong/hopper/scheduler.py",
     "return tile_id // tiles_per_batch, tile_id % tiles_per_batch",
     "return tile_id // (tiles_per_batch + 1), tile_id % tiles_per_batch", "tests/test_fused.py -k raster"),
    ("a (1, 1) bias of one row read per column", "src/pingpong/runtime/spec.py",
     'and shape[0] == m else "col"', 'and shape[0] != 1 else "col"', "tests/test_fused.py"),
    ("direct launch keeps a stale Triton option", "src/pingpong/runtime/launcher.py",
     "and key == (triton.__version__, bool(rt.debug), str(knobs.compilation.instrumentation_mode)))", "and True)",
     "tests/test_launcher.py"),
    ("α and β not refreshed per launch", "src/pingpong/runtime/launcher.py",
     "            args[self._dyn:self._dyn] = dyn  # inserted: every slot sits before them",
     "            pass", "tests/test_launcher.py"),
    ("Hopper bias never loaded", "src/pingpong/hopper/launch.py",
     "BIAS=bias_kind(bias, M), ACTIVATION=activation, BUFS=", 'BIAS="none", ACTIVATION=activation, BUFS=',
     "tests/test_fused.py -k hopper"),
    # -- two-piece tiles and shape selection (issue: the whole shape space)
    ("column pieces swapped (1/3 first)", "src/pingpong/hopper/config.py",
     "return (2 * q, q)", "return (q, 2 * q)", "tests/test_config.py"),
    ("two-piece sub-tiles share 2 buffers", "src/pingpong/hopper/config.py",
     "(2 if (cn // en) % 2 == 0 else cn // en)", "2", "tests/test_config.py"),
    ("two-piece mainloop waits one group, not one k-step", "src/pingpong/hopper/mma.py",
     "warpgroup_mma_wait(2 * PENDING, (self.acc, self.acc2))", "warpgroup_mma_wait(PENDING, (self.acc, self.acc2))",
     "tests/test_isa_hopper.py -k two_piece"),
    ("batched call keeps a two-piece tile", "src/pingpong/hopper/backend.py",
     "split_k=1, block_n=pieces[0], cluster_m=1)", "split_k=1, block_n=config.block_n, cluster_m=1)", "tests/test_plan.py"),
    ("short CTAs weighed like long ones", "src/pingpong/hopper/select.py",
     "efficiency = SHORT_TILE_EFFICIENCY if short else TILE_EFFICIENCY", "efficiency = TILE_EFFICIENCY",
     "tests/test_select.py"),
    ("every CTA short", "src/pingpong/hopper/select.py",
     "short = waves(256) * k_steps <= SHORT_CTA_STEPS", "short = True", "tests/test_select.py"),
    ("few tiles keep 128-row tiles", "src/pingpong/hopper/select.py",
     "return few_tiles(M, N, sms)  # more tiles", "return config  # more tiles", "tests/test_select.py"),
    ("one-wave tiles past one wave", "src/pingpong/hopper/select.py",
     "fits = [c for c in fits if tile_count(c, M, N) <= sms]", "fits = fits", "tests/test_select.py"),
    ("launch-bound keeps 128x128 for many rows", "src/pingpong/hopper/select.py",
     "return few_tiles(M, N, sms) if M > MID_M else KernelConfig(128, 128, 64)",
     "return KernelConfig(128, 128, 64)", "tests/test_select.py"),
    ("quick grid without cooperative 128x128", "src/pingpong/tools/tune.py",
     "KernelConfig(128, 128, 64), KernelConfig(128, 128, 64, schedule=\"pingpong\"),",
     "KernelConfig(128, 128, 64, schedule=\"pingpong\"),", "tests/test_tune.py"),
    ("the two-piece tile as efficient as the big one", "src/pingpong/hopper/select.py",
     "TILE_EFFICIENCY = {256: 1.0, 192: 0.97, 128: 0.9}", "TILE_EFFICIENCY = {256: 1.0, 192: 1.0, 128: 0.9}",
     "tests/test_select.py"),
    ("near table entries always taken", "src/pingpong/hopper/select.py",
     "if exact or (idle_waves(tuned, M, N, K, device.sms) <= NEAR_SLACK * idle_waves(fallback, M, N, K, device.sms)",
     "if True or (idle_waves(tuned, M, N, K, device.sms) <= NEAR_SLACK * idle_waves(fallback, M, N, K, device.sms)",
     "tests/test_select.py"),
    ("near entries taken however they pad the shape", "src/pingpong/hopper/select.py",
     "and tile_fill(tuned, M, N) * NEAR_SLACK >= tile_fill(tuned, entry[\"M\"], entry[\"N\"])):",
     "and True):", "tests/test_select.py"),
    ("mid rows: a split costs nothing", "src/pingpong/hopper/select.py",
     "(k_steps / config.split_k + split_steps)", "(k_steps / config.split_k)", "tests/test_select.py"),
    ("mid rows: every tile as fast per FLOP", "src/pingpong/hopper/select.py",
     "area = config.block_m * config.block_n / speeds[dataclasses.replace(config, split_k=1)]",
     "area = config.block_m * config.block_n", "tests/test_select.py"),
    ("mid rows: few unsplit tiles keep the model's tile", "src/pingpong/hopper/select.py",
     "return few_tiles(M, N, sms) if few else", "return", "tests/test_select.py"),
    ("decode rows take the mid-size tile", "src/pingpong/hopper/select.py",
     "if DECODE_M < M <= MID_M", "if M <= MID_M", "tests/test_select.py"),
    ("the mid-size width filling the least of the wave", "src/pingpong/hopper/select.py",
     "return max(fits, key=lambda c: tile_count(c, M, N), default=None)",
     "return min(fits, key=lambda c: tile_count(c, M, N), default=None)", "tests/test_select.py"),
    ("decode on 128-row cooperative tiles", "src/pingpong/hopper/select.py",
     'config = KernelConfig(64, 16 if M <= 16 else 32, small_k, schedule="pingpong", swap_ab=True)',
     "config = KernelConfig(128, 16 if M <= 16 else 32, small_k, swap_ab=True)", "tests/test_select.py"),
    ("a long-K mid-size product keeps the narrow tile", "src/pingpong/hopper/select.py",
     "if splits >= 2 else split(mid, M, N, k_steps, sms)", "if False else split(mid, M, N, k_steps, sms)",
     "tests/test_select.py"),
    ("the wide mid-size tile split into short parts", "src/pingpong/hopper/select.py",
     "k_steps // MID_SPLIT_STEPS)", "k_steps // MIN_SPLIT_STEPS)",
     "tests/test_select.py"),
    ("the mid-size tile never split", "src/pingpong/hopper/select.py",
     "if splits >= 2 else split(mid, M, N, k_steps, sms)", "if splits >= 2 else mid", "tests/test_select.py"),
    ("small tiles back to one k-step per ring slot", "src/pingpong/hopper/select.py",
     "small_k = SMALL_TILE_K_BYTES // in_bytes", "small_k = 64", "tests/test_select.py"),
    ("the split rules count the config's k-steps", "src/pingpong/hopper/select.py",
     "k_steps = math.ceil(K / SPLIT_STEP_K)", "k_steps = math.ceil(K / small_k)", "tests/test_select.py"),
    ("tune's space without two-k-step slots", "src/pingpong/tools/tune.py",
     "itertools.product(TILES, K_BYTES, SCHEDULES", "itertools.product(TILES, K_BYTES[:1], SCHEDULES",
     "tests/test_tune.py"),
    ("the quick grid tries only the 64x96 mid-size tile", "src/pingpong/tools/tune.py",
     'grid += [KernelConfig(64, bn, 64, schedule="pingpong") for bn in MID_WIDTHS]',
     'grid += [KernelConfig(64, 96, 64, schedule="pingpong")]', "tests/test_tune.py"),
    # -- the fourth session: FP8 split-K and swap-AB selection, the import layering
    ("FP8 decode keeps the 64-row tiles", "src/pingpong/hopper/fp8_launch.py",
     'if M <= DECODE_M and scaling != "block" and -(-N // 64) >= sms // 4:', "if False:", "tests/test_fp8_swap.py"),
    ("FP8 swap-AB scales not exchanged", "src/pingpong/hopper/fp8_launch.py",
     "return (w, a, scale_b.t(), scale_a.t()) if swap", "return (w, a, scale_a.t(), scale_b.t()) if swap",
     "tests/test_fp8_swap.py"),
    ("FP8 split-K never chosen", "src/pingpong/hopper/fp8_launch.py",
     "    config = split(tile, M, N, k_steps, sms)", "    config = tile", "tests/test_fp8_splitk.py"),
    # -- the fifth session: the FP8 tile by modelled wave time
    ("FP8 wave model without the wave ceiling", "src/pingpong/hopper/fp8_launch.py",
     "cost = lambda c, e: -(-tile_count(c, M, N) // sms) * c.block_m * c.block_n / e",
     "cost = lambda c, e: tile_count(c, M, N) * c.block_m * c.block_n / e",
     "tests/test_fp8.py"),
    ("FP8 65-128 rows back on the 64-row rule", "src/pingpong/hopper/fp8_launch.py",
     "    if M <= 64 or (M <= 128 and not narrow):", "    if M <= 128:", "tests/test_fp8.py"),
    ("FP8 unsplit 128x128 never yields to 128x64", "src/pingpong/hopper/fp8_launch.py",
     "    config = unsplit(config)", "", "tests/test_fp8.py"),
    ("FP8 launch-bound 128x128 never yields to 128x64", "src/pingpong/hopper/fp8_launch.py",
     "        return unsplit(tile)", "        return tile", "tests/test_fp8.py"),
    ("FP8 block-wise takes 128x64 tiles", "src/pingpong/hopper/fp8_launch.py",
     'narrow = scaling != "block"', "narrow = True", "tests/test_fp8.py"),
    ("tuning table reads the version through the package root", "src/pingpong/hopper/table.py",
     "from ..toolchain import __version__", "from .. import __version__", "tests/test_imports.py"),
    ("FP8 rule without the 128x192 tile", "src/pingpong/hopper/fp8_launch.py",
     " (_WIDE, WIDE_EFFICIENCY),\n", "\n", "tests/test_fp8.py"),
    ("FP8 rule without the ping-pong 64x128 tile", "src/pingpong/hopper/fp8_launch.py",
     ",\n                                           (_HALF, HALF_EFFICIENCY)))", "))", "tests/test_fp8.py"),
    # -- Float8Linear's kept launches (their device side: tests/test_fp8_gpu.py)
    ("Float8Linear keeps its launches across a move", "src/pingpong/fp8.py",
     "        self._runs.clear()  # the runs hold views", "        pass  # the runs hold views", "tests/test_fp8.py"),
    ("Float8Linear copies carry its launches", "src/pingpong/fp8.py",
     '        return {**self.__dict__, "_runs": {}}', "        return dict(self.__dict__)", "tests/test_fp8.py"),
    ("Float8Linear's run ignores a replaced scale", "src/pingpong/fp8.py",
     ' and buffers["weight_scale"] is ws and', " and", "tests/test_fp8.py"),
]


def run(name, file, old, new, tests):
    """(killed, by which test): killed when the tests fail."""
    path = ROOT / file
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{name}: expected exactly one {old!r} in {file}, found {text.count(old)}")
    path.write_text(text.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-rfE", "-p", "no:cacheprovider", *tests.split()],
                           cwd=ROOT, capture_output=True, text=True, env=None)
    finally:
        path.write_text(text)
    failed = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return r.returncode != 0, (failed[0] if failed else f"exit {r.returncode}")


def main(argv) -> int:
    chosen = [m for m in MUTATIONS if not argv or m[0] in argv]
    survived = 0
    for m in chosen:
        killed, by = run(*m)
        survived += not killed
        print(f"| {m[0]} | {m[1]} | {'killed by ' + by if killed else 'SURVIVED'} |", flush=True)
    print(f"{len(chosen) - survived}/{len(chosen)} killed")
    return 1 if survived else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
