from .manager import PassManager, optimize  # noqa: F401
