"""kerneltrace's version, in one place: the package, `--version` and SARIF's tool record read it."""

__version__ = "0.1.0"
