"""Rollout engine implementations, registered by dotted path in ``trainer.rollout.ENGINES``."""
