"""Jobs over whole datasets, built from the stages and the writers: resharding and the bucket
shuffle (:mod:`~wdspipes.tools.reshard`), and progress bars (:mod:`~wdspipes.tools.progress`).
"""
