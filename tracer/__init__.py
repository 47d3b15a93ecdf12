"""kerneltrace: which line of Python launched this hot GPU kernel, and why is it there?"""

__version__ = "0.1.0"
