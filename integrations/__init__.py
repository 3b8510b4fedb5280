"""Cohort verifiers inside other trainers: ``trl`` (GRPOTrainer reward functions) and ``verl`` (compute_score)."""
