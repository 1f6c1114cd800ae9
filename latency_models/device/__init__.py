"""The device door: device tables with their typed metadata, the device store, and devices
resolved by name through a registry of runtimes.

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
