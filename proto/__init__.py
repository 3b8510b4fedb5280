"""Generated protobuf/gRPC stubs of the contract (``cohort.proto.grpo.verifier.v1``, ``cohort.proto.grpo.sandbox.v1``).

The wire packages stay ``grpo.verifier.v1`` / ``grpo.sandbox.v1``; only the Python import path is namespaced.
"""
