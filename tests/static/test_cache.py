"""The on-disk cache: a warm scan reads every file's sites back; a changed file is scanned again."""

from __future__ import annotations

from tracer.static import scan


def test_warm_scan_uses_the_cache(sglang_root, tmp_path):
    target = sglang_root / "sglang" / "srt" / "mem_cache"
    cold = scan([target], cache_dir=tmp_path / "cache", jobs=1)
    warm = scan([target], cache_dir=tmp_path / "cache")
    assert cold.cache_hits == 0 and warm.cache_hits == warm.files_scanned == cold.files_scanned
    assert warm.sites == cold.sites


def test_changed_file_is_rescanned(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def forward(x):\n    return x.float()\n")
    first = scan([source], cache_dir=tmp_path / "cache")
    source.write_text("def forward(x):\n    return x.half()\n")
    second = scan([source], cache_dir=tmp_path / "cache")
    assert second.cache_hits == 0 and second.sites[0].method == "half" and first.sites[0].method == "float"
    assert scan([source], cache_dir=tmp_path / "cache").cache_hits == 1
