"""``loadtune doctor --verify``: a self-test of the GPU path that loadtune's figures depend on.

``runner`` runs in the CLI's process and never initialises CUDA there: it starts ``device`` (the
checks of GPU 0, in a fresh interpreter, ``python -m loadtune.engine.verify.device``), reads its
results as they come, then launches one short trial with a rank on every visible GPU through the
same agent a scan uses. The decisions are ``analysis.verify``'s; the outcome is a
``model.verify.Verification``.
"""
