"""What a search yields: objectives with directions, Pareto fronts, hypervolume, and the
trial records a front is read from.

Public names are imported from ``frontier.search``; the modules here are its own."""
