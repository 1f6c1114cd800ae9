"""What a model runs: the operators ONNX Runtime runs for a plan, as templates of its
channel counts, and each op as a one-op ONNX model.

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
