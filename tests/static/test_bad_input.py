"""Files that cannot be read or parsed are skipped with their reason; the scan goes on."""

from __future__ import annotations

import pytest

from tracer.errors import InputError
from tracer.static import resolve_package, scan


def test_bad_files_are_skipped_with_reasons(tmp_path):
    (tmp_path / "good.py").write_text("def forward(x):\n    return x.float()\n")
    (tmp_path / "broken.py").write_text("def forward(x):\n    return x.float(\n")
    (tmp_path / "py2.py").write_text("def f(x):\n    print x.float()\n")
    (tmp_path / "binary.py").write_bytes(b"\x7fELF\x00\x01x.float()")
    (tmp_path / "latin.py").write_bytes(b"# -*- coding: utf-8 -*-\nx = y.float()  # caf\xe9\n")
    (tmp_path / "huge.py").write_bytes(b"x = y.float()\n" + b"#" * (9 * 1024 * 1024))
    result = scan([tmp_path], cache_dir=False, jobs=1)
    assert result.files_scanned == 6
    reasons = {s.path: s.reason for s in result.skipped}
    assert reasons == {
        "binary.py": "binary file (contains NUL bytes)",
        "broken.py": "syntax error at line 2: '(' was never closed",
        "huge.py": "too large to scan (9.4 MB > 8 MB)",
        "latin.py": "undecodable as utf-8: invalid continuation byte",
        "py2.py": "syntax error at line 2: Missing parentheses in call to 'print'. Did you mean print(...)?",
    }
    assert [(s.path, s.line, s.rule) for s in result.sites] == [("good.py", 2, "KT102")]


def test_missing_path_and_unknown_package(tmp_path):
    with pytest.raises(InputError, match="no such file or directory"):
        scan([tmp_path / "nope"], cache_dir=False)
    with pytest.raises(InputError, match="no installed package"):
        resolve_package("no_such_package_kerneltrace")


def test_site_paths_follow_the_import_root(tmp_path):
    package = tmp_path / "src" / "pkg" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "src" / "pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("def forward(x):\n    return x.half()\n")
    (tmp_path / "loose.py").write_text("def forward(x):\n    return x.half()\n")
    result = scan([package, tmp_path / "loose.py"], cache_dir=False, jobs=1)
    assert sorted(s.path for s in result.sites) == ["loose.py", "pkg/sub/mod.py"]


def test_site_paths_do_not_depend_on_a_path_entry_above_an_unpacked_source(tmp_path, monkeypatch):
    """A source tree unpacked as `build/transformers-5.17.0/transformers/...` inside a directory that
    is on sys.path (a repository on PYTHONPATH): no import goes through `transformers-5.17.0`, so the
    files are named from it, as they are when that directory is not on the path."""
    from tracer.static import files

    package = tmp_path / "build" / "transformers-5.17.0" / "transformers" / "models"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "modeling.py").write_text("def forward(x):\n    return x.half()\n")
    names = []
    for on_path in (False, True):
        if on_path:
            monkeypatch.syspath_prepend(str(tmp_path))
        files._import_dirs.cache_clear()
        files._ROOTS.clear()
        try:
            names.append([s.path for s in scan([package], cache_dir=False, jobs=1).sites])
        finally:
            files._import_dirs.cache_clear()
            files._ROOTS.clear()
    assert names == [["transformers/models/modeling.py"]] * 2
