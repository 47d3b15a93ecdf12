"""kerneltrace: which line of Python launched this hot GPU kernel, and why is it there?"""

from tracer.version import __version__

__all__ = ["__version__", "profile"]


def profile(*args, **kwargs):  # the signature is tracer.instrument.profile's
    """`tracer.instrument.profile`: record a run with kerneltrace's ranges (imports torch lazily)."""
    from tracer.instrument import profile as instrumented_profile

    return instrumented_profile(*args, **kwargs)
