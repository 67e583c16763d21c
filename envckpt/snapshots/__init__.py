"""The operator's view of a snapshot root: ``envckpt snapshots list|show|verify|prune|delete``.

    cli.add_parser(subparsers); cli.run(args)        # the console script's verbs
    describe(SnapshotCatalog(root).entry(cid))      # details: one snapshot in full
    verify_snapshot_dir(path)                        # every digest and every file's content

Modules: ``details`` (one snapshot's instances, participants and restore
outlook), ``verify`` (offline checks), ``render`` (rich tables and JSON),
``cli`` (the verbs). Listing and lookup by step live in
``envckpt.trainer.catalog``, for trainers too.
"""
