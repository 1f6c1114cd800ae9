"""How a trial runs: what scores it, on which accelerator, in which worker or backend,
which sampler proposes it and which rung promotes it.

Public names are imported from ``frontier.search``; the modules here are its own."""
