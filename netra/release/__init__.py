"""What runs at release time, in a source tree: from the sources to a lock, a build and a gated wheel.

manifests: the templates, tactics and model manifests, read strictly (the release's catalog); build:
`netra lock`, `--check` and `netra build`, one derivation of the lock from the tree; lock: writing the
lock and comparing two; tablegen: the tables `netra lock` writes; staging: what a wheel carries under
netra/_data; wheelgate: a wheel or sdist checked against its lock; writelock: one `netra lock` at a
time. Nothing at install or serving time imports this package.
"""
