from .inputs import sample_inputs  # noqa: F401
from .parity import compare, OutputReport  # noqa: F401
