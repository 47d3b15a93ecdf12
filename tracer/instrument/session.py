"""`profile()`: site and function ranges installed, torch.profiler running on a step schedule, trace out.

    with tracer.profile(sites=scan(["model.py"]).sites, steps=3, out="trace.json.gz") as session:
        for _ in range(5):
            model.decode_step(x)
            session.step()

At the end the trace is written (``.json`` or ``.json.gz``) and explained: `session.analysis` holds
the `Analysis`. Nothing is printed unless asked: ``print_table=True`` (or a ``console``) prints the
explain table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer.errors import InputError
from tracer.instrument.functions import FunctionRanges
from tracer.instrument.inductor import ProvenanceRecording, keep_beside, record_provenance
from tracer.instrument.patch import InstrumentationReport, SiteInstrumentation
from tracer.instrument.plan import ALL_SITES, SitePlan, SiteSelection
from tracer.model.finding import Analysis
from tracer.model.site import Site

if TYPE_CHECKING:
    import torch.profiler

logger = logging.getLogger("kerneltrace")


class ProfileSession:
    """One profiled run. Use as a context manager; call `step()` once per step (or name a step function)."""

    def __init__(
        self,
        *,
        sites: Sequence[Site] = (),
        steps: int | None = None,
        out: str | Path = "out/kerneltrace-profile.json.gz",
        with_stack: bool = False,
        warmup: int = 1,
        wait: int = 0,
        functions: Sequence[str] = (),
        step_function: str | None = None,
        selection: SiteSelection = ALL_SITES,
        record_shapes: bool = True,
        explain: bool = True,
        console: Any = None,
        layers: int | None = None,
        print_table: bool = False,
        inductor_provenance: bool = True,
    ) -> None:
        if steps is not None and steps < 1:
            raise InputError("--steps", f"must be at least 1 (got {steps})")
        if warmup < 0 or wait < 0:
            raise InputError("--warmup/--wait", "must not be negative")
        self.out = Path(out)
        if not (self.out.name.endswith(".json") or self.out.name.endswith(".json.gz")):
            raise InputError(self.out, "the trace file must end in .json or .json.gz")
        self.sites = tuple(sites)
        self.steps = steps
        self.with_stack = with_stack
        self.warmup = warmup
        self.wait = wait
        self.function_paths = tuple(functions)
        self.step_function = step_function
        self.selection = selection
        self.record_shapes = record_shapes
        self.explain = explain
        self.console = console
        self.print_table = print_table or console is not None
        self.layers = layers
        self.inductor_provenance = inductor_provenance  # torch.compile'd code: record where kernels come from
        self._provenance: ProvenanceRecording | None = None
        self.steps_taken = 0
        self.trace_written = False
        self.analysis: Analysis | None = None
        self.instrumentation = SiteInstrumentation(SitePlan(self.sites, selection=selection))
        self.functions = FunctionRanges(self.function_paths)
        self._profiler: torch.profiler.profile | None = None

    @property
    def report(self) -> InstrumentationReport:
        return self.instrumentation.report

    # -- the run ----------------------------------------------------------------------------------
    def __enter__(self) -> ProfileSession:
        if self.inductor_provenance:  # before the code compiles: Inductor records its kernels' origins
            self._provenance = record_provenance()
        import torch
        from torch.profiler import ProfilerActivity, schedule

        self.out.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.sites:
                self.instrumentation.install()
            self.functions.install()
            if self.step_function:
                self.functions.install_step(self.step_function, self.step)
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            plan = None
            if self.steps is not None:
                plan = schedule(wait=self.wait, warmup=self.warmup, active=self.steps, repeat=1)
            self._profiler = torch.profiler.profile(
                activities=activities,
                schedule=plan,
                on_trace_ready=self._write_trace,
                record_shapes=self.record_shapes,
                with_stack=self.with_stack,
            )
            self._profiler.__enter__()
        except BaseException:
            self._undo()
            raise
        return self

    def step(self) -> None:
        """Mark the end of one step (ProfilerStep#N in the trace; drives the wait/warmup/active schedule)."""
        self.steps_taken += 1
        if self._profiler is not None:
            if self.steps is not None and self.steps_taken == self.wait + self.warmup:
                _drain_gpu()
            self._profiler.step()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self._profiler is not None:
                self._profiler.__exit__(None, None, None)
                if not self.trace_written and self.steps is None:
                    self._write_trace(self._profiler)
        finally:
            self._profiler = None
            self._undo()
            if self._provenance is not None:
                self._provenance.close()
        if exc_type is not None:
            return
        if not self.trace_written:
            needed = self.wait + self.warmup + 1
            raise InputError(
                self.out,
                f"no trace recorded: {self.steps_taken} step(s) ran, the schedule needs at least {needed} "
                f"(wait {self.wait} + warmup {self.warmup} + 1 active)",
            )
        if self.explain:
            self.analysis = self.explain_now(print_table=self.print_table)

    def _undo(self) -> None:
        self.functions.uninstall()
        self.instrumentation.uninstall()

    def _write_trace(self, profiler: Any) -> None:
        if self.trace_written:
            return
        profiler.export_chrome_trace(str(self.out))
        self.trace_written = True
        if self._provenance is not None:  # compiled code's provenance, kept beside the trace
            keep_beside(self.out, self._provenance)

    # -- the answer -------------------------------------------------------------------------------
    def explain_now(self, print_table: bool = False) -> Analysis | None:
        """Explain the written trace with the instrumented sites; print the table if asked (on the
        session's console, else stdout, fitted to its width: 200 columns when it is not a terminal)."""
        try:
            from tracer.api import explain_trace
        except ImportError:  # the explain stage is not part of this checkout
            logger.warning("kerneltrace: trace written to %s (no explain stage available)", self.out)
            return None
        analysis = explain_trace(self.out, sites=list(self.sites) or None, layers=self.layers)
        if print_table:
            from tracer.render.table import print_table as print_analysis

            console = self.console
            if console is None:
                from tracer.render.console import table_console

                console = table_console()
            print_analysis(analysis, console)
        return analysis


@contextlib.contextmanager
def profile(sites: Sequence[Site] = (), **options: Any):
    """Profile a block with kerneltrace's ranges; yields the `ProfileSession` (call `.step()` per step).

    `sites`: sites to bracket with exact-origin ranges (from `tracer.static.scan`), filtered by
    ``selection=SiteSelection(...)``; ``functions``: dotted paths to wrap in ``kt:fn:`` ranges;
    ``step_function="pkg.mod.Class.method"`` makes each call one step; ``steps`` active steps after
    ``wait`` + ``warmup`` (None: record the whole block). Options and defaults: `ProfileSession`.
    """
    session = ProfileSession(sites=sites, **options)
    with session:
        yield session


def _drain_gpu() -> None:
    """Wait for the GPU before the recorded steps start, so that none of the earlier steps' kernels
    (queued by a CPU running ahead) run inside the recorded window without their launches: on an
    H200, 7% of a recorded window's GPU time was such work. Never raises into the profiled code."""
    try:
        import torch

        if (
            torch.cuda.is_available()
            and torch.cuda.is_initialized()
            and not torch.cuda.is_current_stream_capturing()
        ):
            torch.cuda.synchronize()
    except Exception:
        logger.warning("kerneltrace: could not wait for the GPU before recording", exc_info=True)
