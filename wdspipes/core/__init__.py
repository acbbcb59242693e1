"""What every stage stands on: the stage base and how stages get their functional names
(:mod:`~wdspipes.core.datapipe`) and pickle (:mod:`~wdspipes.core.pickling`), curried stages
for ``DataPipeline`` (:mod:`~wdspipes.core.curried`), the rules of member names that reading
and writing share (:mod:`~wdspipes.core.names`), seeds and epochs
(:mod:`~wdspipes.core.seeds`), ranks and workers (:mod:`~wdspipes.core.distributed`), and
torchdata's mends (:mod:`~wdspipes.core.compat`), among them DataLoader2's workers seen from
the main process (:mod:`~wdspipes.core.worker_queues`) and the state of the loaders
(:mod:`~wdspipes.core.loader_state`).

Besides :mod:`wdspipes.errors`, it imports only :mod:`wdspipes.state`, the state protocol and
its walker.
"""
