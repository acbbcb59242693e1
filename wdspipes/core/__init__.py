"""What every stage stands on, without torch: the core stage base
(:mod:`~wdspipes.core.stage`), curried stages for ``DataPipeline`` (:mod:`~wdspipes.core.curried`),
the rules of member names that reading and writing share (:mod:`~wdspipes.core.names`), seeds and
epochs (:mod:`~wdspipes.core.seeds`), ranks and workers (:mod:`~wdspipes.core.distributed`), and
the liveness of processes (:mod:`~wdspipes.core.processes`). No module here imports torch at its
top; the DataPipe base is in :mod:`wdspipes.pipes`, torchdata's loaders and their mends in
:mod:`wdspipes.loaders`.

Besides :mod:`wdspipes.errors`, it imports only :mod:`wdspipes.state`, the state protocol and
its assembler.
"""
