"""aotc: an ahead-of-time compiler from ONNX models to C shared libraries."""
__version__ = "0.1.0"

from .api import CompiledModel, compile, load  # noqa: E402,F401
from .errors import AotcError  # noqa: E402,F401
