"""What every stage stands on: the stage base and how stages get their functional names
(:mod:`~wdspipes.core.datapipe`), curried stages for ``DataPipeline``
(:mod:`~wdspipes.core.curried`), seeds (:mod:`~wdspipes.core.seeds`), ranks and workers
(:mod:`~wdspipes.core.distributed`), the state protocol of a stage
(:mod:`~wdspipes.core.resumable`), the walker that saves and restores a pipeline's state
(:mod:`~wdspipes.core.resume`), torch's own stages in it (:mod:`~wdspipes.core.torch_stages`),
and torchdata's mends (:mod:`~wdspipes.core.compat`).

Nothing here imports a module of ``read``, ``samples``, ``write`` or ``tools``.
"""
