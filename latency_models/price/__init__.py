"""Pricing a plan on a device from its table: each op alone, then calibrated into a whole-
model estimate (or transferred from another device's table).

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
