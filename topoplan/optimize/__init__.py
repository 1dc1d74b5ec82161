"""The optimizer: enumerate a design space, evaluate every candidate through the pipeline, keep the
cost / completion-time Pareto front (``space.py``, ``search.py``)."""
