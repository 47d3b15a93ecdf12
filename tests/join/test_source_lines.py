"""Source files a trace names are read only inside the resolved source roots."""

from __future__ import annotations

from pathlib import Path

from tracer.join.source_lines import SourceLines


def test_a_symlink_out_of_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("password = 'hunter2'\n")
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "model.py").write_text("x = 1\ny = x.to(torch.bfloat16)\n")
    (root / "pkg" / "secret.py").symlink_to(outside / "secret.py")
    (root / "pkg" / "linked_dir").symlink_to(outside, target_is_directory=True)
    source = SourceLines([root])
    assert source.line("pkg/model.py", 2) == "y = x.to(torch.bfloat16)"
    assert source.find("pkg/secret.py") is None
    assert source.find("pkg/linked_dir/secret.py") is None
    assert source.find(str(outside / "secret.py")) is None  # an absolute name outside the roots
    # A link that stays inside the root is fine.
    (root / "pkg" / "alias.py").symlink_to(root / "pkg" / "model.py")
    assert source.line("pkg/alias.py", 1) == "x = 1"
