"""Where measuring happens: loading the spec, reading the machine, running trials in isolated
processes (``trial/``), several ranks per trial (``distributed/``), and the orchestration of a scan,
a check and ``doctor``. The Python API (``loadtune.scan``) lives in ``engine.scan`` (its options checked in
``engine.options``, its plan prepared in ``engine.plan``)."""
