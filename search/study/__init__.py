"""Where a search's study lives: the Optuna storage (a journal file or a database) and the
driver's lock on it.

Public names are imported from ``frontier.search``; the modules here are its own."""
