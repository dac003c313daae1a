"""Scripts that build the model zoo locally and reproducibly (random weights, fixed seeds)."""
