"""Tuning inside the training run: ``loadtune.autotune`` (docs/autotune.md).

A loader used like a ``DataLoader`` that tries DataLoader configs on the live training loop, each for
a short measured window, then settles on the best and runs as a plain ``DataLoader`` with it. The
epoch's order comes from one sampler, handed out to each loader in turn (``order.py``); the timing of
the live loop is ``meter.py``; the search and the decision, the scan's own (``tuner.py``); several
ranks agree through ``torch.distributed`` (``ranks.py``); the outcome is ``report.py``. The loader
the loop iterates is ``loader.py``; what its batches and epochs do to the tuning, the state machine of
``phases.py``; the loaders alive meanwhile, ``runs.py``; the budget used, ``progress.py``.

The package is not named ``autotune``: importing a sub-package binds its name on ``loadtune``, which
would shadow the function ``loadtune.autotune``.
"""
