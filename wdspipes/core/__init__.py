"""What every stage stands on: the stage base and how stages get their functional names
(:mod:`~wdspipes.core.datapipe`) and pickle (:mod:`~wdspipes.core.pickling`), curried stages
for ``DataPipeline`` (:mod:`~wdspipes.core.curried`), the rules of member names that reading
and writing share (:mod:`~wdspipes.core.names`), seeds (:mod:`~wdspipes.core.seeds`), ranks
and workers (:mod:`~wdspipes.core.distributed`), the state protocol of a stage
(:mod:`~wdspipes.core.resumable`), the walker that saves and restores a pipeline's state
(:mod:`~wdspipes.core.resume`), torch's own stages in it (:mod:`~wdspipes.core.torch_stages`),
and torchdata's mends (:mod:`~wdspipes.core.compat`).

Nothing here imports another folder of wdspipes: only :mod:`wdspipes.errors`.
"""
