"""The search loop and what it does around it: set-up, callbacks (progress, MLflow,
energy), what it watches, and where its time went.

Public names are imported from ``frontier.search``; the modules here are its own."""
