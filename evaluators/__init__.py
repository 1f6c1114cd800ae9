"""How good a compressed model is, one Evaluator per objective (accuracy, size, latency,
energy, carbon). Empty until the evaluators issue lands; nothing here is public yet."""

__all__: list[str] = []
