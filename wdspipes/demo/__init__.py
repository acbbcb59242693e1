"""The main job of wdspipes, end to end: ``wdspipes demo`` (or ``python -m wdspipes.demo``).

1. Draw an image-classification dataset with Pillow (:mod:`wdspipes.demo.shapes`): pictures of
   shapes in random colours, sizes, places and angles over noise, from a seed.
2. Write it with :class:`~wdspipes.ShardWriter` as training and validation shards.
3. Train a small CNN on CPU (:mod:`wdspipes.demo.training`), reading the shards through
   ``WebDataset(..., shardshuffle=True)`` and DataLoader2's worker processes (torch's
   DataLoader's where torchdata, 0.10 and later, has no DataLoader2), and evaluate it on the
   validation shards after each epoch.
4. Draw a sheet of predictions and the loss curve (:mod:`wdspipes.demo.pictures`), and name
   everything written (:mod:`wdspipes.demo.run`).

Its options are :class:`wdspipes.demo.options.DemoOptions` (no torch needed to read them), and
:func:`wdspipes.demo.run.run_demo` runs it.
"""
