"""Op bundles: every operator a space can produce, its whole models and corner plans,
packed for the device runner; a front's members packed the same way.

Public names are imported from ``frontier.latency_models``; the modules here are its own."""
