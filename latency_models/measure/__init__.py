"""Measuring on this machine and checking a table: local tables, validation against whole
models, per-layer profiles, and measured fronts joining a table.

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
