from .planner import MemoryPlan, elide_concats, plan_memory  # noqa: F401
