"""MLflow read and written: a search's runs, its front read back for ``frontier pareto``
and ``pick``, and the front measured and learnt from.

Public names are imported from ``frontier.search``; the modules here are its own."""
