"""What a search is asked: the config file, its constraints, the names it may give a
sampler or backend, and uniform anchor plans.

Public names are imported from ``frontier.search``; the modules here are its own."""
