"""aotc: an ahead-of-time compiler from ONNX models to C shared libraries."""
from .api import CompiledModel, compile, load  # noqa: F401
from .errors import AotcError  # noqa: F401
from .generate import Generator, generate  # noqa: F401
from .version import __version__  # noqa: F401
