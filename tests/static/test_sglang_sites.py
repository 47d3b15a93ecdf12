"""Hand-checked facts about sites in real sglang 0.5.23 files (lines checked by eye in the source)."""

from __future__ import annotations

from collections import Counter

import pytest

from tracer.static import scan_source


def _sites(sglang_root, rules, relative):
    result = scan_source((sglang_root / relative).read_bytes(), relative, rules)
    assert result.skipped is None and not result.notes
    return {(s.line, s.col, s.rule): s for s in result.sites}, result.sites


def test_triton_backend_sites(sglang_root, rules):
    sites, all_sites = _sites(sglang_root, rules, "sglang/srt/layers/attention/triton_backend.py")
    # `return o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim).to(q.dtype)`, def forward_decode( at 2288
    cast = sites[(2470, 19, "KT101")]
    assert cast.function == "TritonAttnBackend.forward_decode" and cast.def_line == 2288
    assert cast.method == "to" and cast.kind == "to" and cast.target_dtype == "q.dtype"
    assert cast.text == "o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim).to(q.dtype)"
    assert cast.receiver == "o.reshape(-1, layer.tp_q_head_num * layer.v_head_dim)"
    assert cast.aten_ops == ("aten::to", "aten::_to_copy", "aten::copy_")
    assert "unrolled_elementwise_kernel" in cast.kernel_families
    # `k_scaled = k.clone().div_(layer.k_scale)` inside forward_extend (def at 1669)
    clone = sites[(1727, 31, "KT202")]
    assert (clone.function, clone.def_line, clone.method) == (
        "TritonAttnBackend.forward_extend",
        1669,
        "clone",
    )
    # a nested function: `def call_fn(i, forward_batch):` at 2738 inside init_forward_metadata
    nested = sites[(2740, 16, "KT202")]
    assert nested.function == "TritonMultiStepDraftBackend.init_forward_metadata.<locals>.call_fn"
    assert nested.def_line == 2738
    # `extend_start_loc = torch.cat(` in _forward_extend_unified (def at 2141)
    cat = sites[(2229, 31, "KT301")]
    assert (cat.method, cat.function, cat.def_line) == (
        "cat",
        "TritonAttnBackend._forward_extend_unified",
        2141,
    )
    assert cat.end_line == 2234 and cat.aten_ops == ("aten::cat",)
    # a module-level function: `kv_indptr[1 : bs + 1] = ...` slice store in update_sliding_window_buffer
    store = sites[(2873, 4, "KT307")]
    assert (store.method, store.function, store.def_line) == (
        "__setitem__",
        "update_sliding_window_buffer",
        2845,
    )
    assert store.receiver == "window_kv_indptr" and store.args[0] == "1 : bs + 1"
    assert len(all_sites) == 52


def test_memory_pool_sites(sglang_root, rules):
    sites, all_sites = _sites(sglang_root, rules, "sglang/srt/mem_cache/memory_pool.py")
    # `cache_k = cache_k.to(self.dtype)` in MHATokenToKVPool.set_kv_buffer (def at 2891): a hot KV writer
    cast = sites[(2931, 22, "KT101")]
    assert (cast.function, cast.def_line, cast.target_dtype) == (
        "MHATokenToKVPool.set_kv_buffer",
        2891,
        "self.dtype",
    )
    assert cast.risk == 50 and any("per-step" in r for r in cast.reasons)
    # `return self.k_buffer[local_layer_id].view(self.dtype)`: zero-copy, launches nothing
    view = sites[(2849, 19, "KT401")]
    assert view.function == "MHATokenToKVPool._get_key_buffer" and view.def_line == 2836
    assert view.launches_kernel is False and view.risk == 0 and view.aten_ops == ("aten::view",)
    # `self.kv_buffer[layer_id - self.start_layer][loc] = cache_k.view(` : a store holding a view
    store = sites[(4974, 12, "KT306")]
    assert store.function == "MLATokenToKVPool.set_kv_buffer" and store.def_line == 4942
    assert store.receiver == "self.kv_buffer[layer_id - self.start_layer]" and store.args[0] == "loc"
    assert store.end_line == 4976 and store.aten_ops == ("aten::index_put_", "aten::_index_put_impl_")
    assert (4974, 63, "KT401") in sites
    # `values.cpu()` under `@staticmethod` (line 3195) above `def _to_cpu_int_list` (3196): CPython's
    # co_firstlineno, which profiler frames print, is the decorator's line
    # (`[int(value) for value in values.cpu().tolist()]`: the first iterable runs once, not per element)
    move = sites[(3200, 44, "KT205")]
    assert move.function == "MHATokenToKVPool._to_cpu_int_list" and move.def_line == 3195
    assert move.target_device == "cpu" and move.in_loop is False
    # `gathered.reshape(...).view(torch.uint8).view(torch.float8_e8m0fnu)` (line 4090): two views, one
    # start position; `nth` and the text keep their ids apart
    chained = [s for s in all_sites if (s.line, s.col) == (4090, 12)]
    assert [s.target_dtype for s in chained] == ["torch.float8_e8m0fnu", "torch.uint8"]
    counts = Counter(s.rule for s in all_sites)
    assert counts["KT306"] == 52 and counts["KT401"] == 32 and counts["KT101"] == 15


@pytest.mark.slow
def test_whole_package_scans_without_crashing(full_scan, sglang_package):
    result, _ = full_scan
    files = sum(1 for _ in sglang_package.rglob("*.py"))
    assert result.files_scanned == files > 4000
    assert result.skipped == ()  # every sglang 0.5.23 file parses
    assert len(result.sites) > 20_000
    assert [s.risk for s in result.sites] == sorted((s.risk for s in result.sites), reverse=True)
    assert len({s.id for s in result.sites}) == len(result.sites)  # ids are unique
    # Triton kernels are skipped: no `.to(tl.float32)` anywhere
    assert not any("tl." in (s.target_dtype or "") for s in result.sites)
    # the founding case's pattern ranks at the top: the whole KV pool cast per layer in decode
    top = result.sites[0]
    assert top.rule == "KT101" and "get_key_buffer" in top.receiver and top.risk >= 85
    # sglang 0.5.23 never casts a whole KV buffer with `.float()`/`.half()`/`.bfloat16()` (KT105), and
    # index tensors named like one (`req_pool_indices`, `kv_indices`) stay KT102
    assert not any(s.rule == "KT105" for s in result.sites)


def test_rows_of_a_kv_pool_cast_stay_kt102(sglang_root, rules):
    """KT105 takes `.float()` of a whole KV buffer; rows gathered out of it first are the good order."""
    sites, _ = _sites(sglang_root, rules, "sglang/test/kits/unified_radix_cache/mixins.py")
    # `kv_pool.get_key_buffer(layer_id)[indices].float().cpu().clone()` in _snapshot_full_kv
    rows = sites[(301, 12, "KT102")]
    assert rows.receiver == "kv_pool.get_key_buffer(layer_id)[indices]" and rows.kind == "cast_method"
    assert (302, 12, "KT102") in sites and not any(rule == "KT105" for _, _, rule in sites)
