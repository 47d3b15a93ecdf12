"""kerneltrace: which line of Python launched this hot GPU kernel, and why is it there?"""

__version__ = "0.1.0"


def profile(*args, **kwargs):  # the signature is tracer.instrument.profile's
    """`tracer.instrument.profile`: record a run with kerneltrace's ranges (imports torch lazily)."""
    from tracer.instrument import profile as instrumented_profile

    return instrumented_profile(*args, **kwargs)
