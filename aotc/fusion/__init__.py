from .groups import Group, form_groups  # noqa: F401
