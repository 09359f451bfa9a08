"""Tuning inside the training run: ``loadtune.autotune`` (docs/autotune.md).

A loader used like a ``DataLoader`` that tries DataLoader configs on the live training loop, each for
a short measured window, then settles on the best and runs as a plain ``DataLoader`` with it. The
epoch's order comes from one sampler, handed out to each loader in turn (``order.py``); the timing of
the live loop is ``meter.py``; the search and the decision, the scan's own (``tuner.py``); several
ranks agree through ``torch.distributed`` (``ranks.py``); the outcome is ``report.py``.

The package is not named ``autotune``: importing a sub-package binds its name on ``loadtune``, which
would shadow the function ``loadtune.autotune``.
"""
