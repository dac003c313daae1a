"""Host program IR: what the run function does (see ir.py)."""
from .ir import HostLoop, Launch, Program, Slot, build_program

__all__ = ["HostLoop", "Launch", "Program", "Slot", "build_program"]
