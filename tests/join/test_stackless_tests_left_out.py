"""Without stacks, a package's own tests are not ranked ahead of it: SGLang ships 702 test files in its
package (``sglang/test/kits/...``), whose reference implementations run in one function what the
library runs across several (the attention backend, the KV pool, the layer), so they fit a window of
the library's ops better than the library's own functions do, and took 11% of the op time of the
corpus's SGLang attention extend. A served model runs the library, not its tests: they are not
aligned with the windows, and a copy of a library function in a test goes after it.

A package made so (two functions of the library the caller runs one after the other, a test's
reference that runs both in one), profiled on CPU without stacks."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tracer.join.stackless import Candidate, _tests_last, is_test_code

torch = pytest.importorskip("torch")

OPS = """
import torch


def project(x, weight):
    return torch.nn.functional.linear(x, weight)


def normalize(h, weight):
    variance = h.pow(2).mean(-1, keepdim=True)
    return weight * (h * torch.rsqrt(variance + 1e-6))
"""
REFERENCE = """
import torch


def reference(x, proj_weight, norm_weight):
    h = torch.nn.functional.linear(x, proj_weight)
    variance = h.pow(2).mean(-1, keepdim=True)
    return norm_weight * (h * torch.rsqrt(variance + 1e-6))
"""


def test_what_is_test_code() -> None:
    assert is_test_code("sglang/test/kits/attention_unittest/attention_methods/dense_attention.py")
    assert is_test_code("pkg/tests/helpers.py") and is_test_code("pkg/testing/x.py")
    assert is_test_code("pkg/test_ops.py") and is_test_code("pkg/ops_test.py") and is_test_code("conftest.py")
    assert not is_test_code("transformers/testing_utils.py")  # a module of the library
    assert not is_test_code("sglang/srt/layers/attention/torch_native_backend.py")
    assert not is_test_code("pkg/latest.py") and not is_test_code("pkg/attest/ops.py")


def test_a_copy_in_a_test_goes_after_the_library() -> None:
    """A copy of a library function in a test file (`agree` answers each copy) ranks after it."""
    test = Candidate("pkg/test/reference.py", 8, -5.0, "reference")
    library = Candidate("pkg/ops.py", 11, -4.0, "normalize")
    ranked, said = _tests_last((test, library))
    assert ranked == (library, test)
    expected = (
        "`reference` (pkg/test/reference.py) is a package's test code, which a served model does not run: "
        "its line after the library's"
    )
    assert said == (expected,)
    assert _tests_last((test,)) == ((test,), ())  # only tests fit: they stay


def _package(root: Path) -> Path:
    package = root / "ktlibpkg"
    (package / "test").mkdir(parents=True)
    for path, text in (
        ("__init__.py", ""),
        ("ops.py", OPS),
        ("test/__init__.py", ""),
        ("test/reference.py", REFERENCE),
    ):
        (package / path).write_text(textwrap.dedent(text))
    return package


def test_the_library_answers_not_its_tests(
    tmp_path: Path, profile_without_stacks, import_from_package
) -> None:
    from tracer.api import explain_trace

    package = _package(tmp_path)
    ops = import_from_package(package, "ktlibpkg.ops")
    torch.manual_seed(0)
    x, weight, gain = torch.randn(4, 16), torch.randn(16, 16), torch.ones(16)

    def run() -> None:
        ops.normalize(ops.project(x, weight), gain)

    analysis = explain_trace(profile_without_stacks(run, tmp_path / "ops.json"), source=[package])
    rsqrt = next(
        i for i, line in enumerate((package / "ops.py").read_text().splitlines(), 1) if "rsqrt" in line
    )
    answered = {
        (f.origin.file, f.origin.line) for f in analysis.findings if f.origin.ops[:1] == ("aten::rsqrt",)
    }
    # the library's line, not the test's reference (the code before answered `reference`'s)
    assert answered == {("ktlibpkg/ops.py", rsqrt)}
    assert not [f for f in analysis.findings if f.origin.file and "/test/" in f.origin.file]
