from .planner import MemoryPlan, plan_memory  # noqa: F401
