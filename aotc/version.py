"""aotc's version: in the manifest of every artifact and in `aotc --version`."""
__version__ = "0.1.0"
