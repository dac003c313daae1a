"""Host program IR: what the run function does (see ir.py)."""
from .ir import Copy, HostLoop, Launch, Program, Slot, build_program

__all__ = ["Copy", "HostLoop", "Launch", "Program", "Slot", "build_program"]
