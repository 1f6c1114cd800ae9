"""How a table's per-op sum becomes a whole-model prediction: kernels in context,
calibrations, per-op corrections, and the cross-validation that chooses among them.

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
