"""Several models sharing one frame: a pipeline's stages priced in every placement, and
searched as one (every stage's plan and placement in one joint space).

Public names are imported from ``frontier.search``; the modules here are its own."""
