"""ONNX out of a plan: files of any size, ONNX Runtime's INT8 as Frontier uses it, and the
export itself.

Public names are imported from ``frontier.spaces``; the modules here are its own."""
