"""Cohort verifiers inside other trainers: ``trl`` (GRPOTrainer reward functions) and ``verl`` (compute_score);
and behind other standards' servers: ``nemo_gym`` (a resources server's ``/verify``) and ``ors`` (an Open
Reward Standard environment)."""
